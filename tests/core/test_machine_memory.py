"""The memory budget reads a container's limit: `docker run --memory 4g` on a 64 GB host still showed 64 GB to
os.sysconf, so half of it let through a text whose whole maps the container then killed."""

import pytest

from core.extraction import machine_memory, maps_budget

GB = 10 ** 9


def fake_cgroups(monkeypatch, tmp_path, proc_lines, limits):
    """A /proc/self/cgroup with `proc_lines` and limit files {relative path: text} under a fake /sys/fs/cgroup."""
    (tmp_path / "cgroup").write_text("\n".join(proc_lines) + "\n")
    for relative, text in limits.items():
        (tmp_path / "fs" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / relative).write_text(text + "\n")
    monkeypatch.setattr(machine_memory, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(machine_memory, "CGROUP_ROOT", tmp_path / "fs")
    monkeypatch.setattr(machine_memory, "_physical_memory", lambda: 64 * GB)
    monkeypatch.delenv(maps_budget.ENV_MAX_MAPS, raising=False)


@pytest.mark.parametrize("proc_lines, limits, expected", [
    (["0::/"], {"memory.max": str(4 * GB)}, 4 * GB),  # cgroup v2 in a container's own namespace
    (["0::/system.slice/app.service"], {"system.slice/memory.max": str(3 * GB),
                                        "system.slice/app.service/memory.max": "max"}, 3 * GB),  # a parent's
    (["4:memory:/docker/abc", "1:cpu:/"], {"memory/memory.limit_in_bytes": str(2 * GB)}, 2 * GB),  # v1, mounted
    (["4:cpuacct,memory:/a"], {"memory/a/memory.limit_in_bytes": str(5 * GB)}, 5 * GB),  # joined controllers
    (["4:memory:/"], {"memory/memory.limit_in_bytes": "9223372036854771712"}, 64 * GB),  # v1 "unlimited"
    (["0::/"], {"memory.max": "max"}, 64 * GB),
    (["0::/"], {"memory.max": str(128 * GB)}, 64 * GB),  # a limit above the machine's memory
    (["0::/"], {}, 64 * GB),  # no limit files (the v2 root has none)
])
def test_the_memory_this_process_may_use_is_the_tightest_cgroup_limit_or_the_machine(
        monkeypatch, tmp_path, proc_lines, limits, expected):
    fake_cgroups(monkeypatch, tmp_path, proc_lines, limits)
    assert machine_memory.machine_memory() == expected
    assert maps_budget.maps_budget() == expected // 2


def test_without_proc_files_the_machine_memory_counts(monkeypatch, tmp_path):
    monkeypatch.setattr(machine_memory, "PROC_CGROUP", tmp_path / "missing")
    monkeypatch.setattr(machine_memory, "_physical_memory", lambda: 8 * GB)
    assert machine_memory.machine_memory() == 8 * GB
    monkeypatch.setattr(machine_memory, "_physical_memory", lambda: None)
    assert machine_memory.machine_memory() is None


def test_the_environment_variable_still_overrides_the_container_limit(monkeypatch, tmp_path):
    fake_cgroups(monkeypatch, tmp_path, ["0::/"], {"memory.max": str(4 * GB)})
    monkeypatch.setenv(maps_budget.ENV_MAX_MAPS, str(10 * GB))
    assert maps_budget.maps_budget() == 10 * GB


def test_maps_on_a_cuda_gpu_are_held_to_its_free_memory(monkeypatch, tmp_path):
    """With output_attentions every layer's maps stay on the model's GPU until the forward ends: the budget was half
    the host's memory (64 GB of maps let through on a 128 GB host with a 24 GB GPU), and the GPU ran out."""
    import torch

    import tiny
    from core import InputError

    fake_cgroups(monkeypatch, tmp_path, ["0::/"], {})
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * GB, 24 * GB))
    assert maps_budget.maps_budget(torch.device("cuda:0")) == 3 * GB
    assert maps_budget.maps_budget(torch.device("cpu")) == maps_budget.maps_budget() == 32 * GB
    model = tiny.tiny_gpt2()
    tokens = 20_000  # 2 layers x 4 heads x 20,000^2 x 4 bytes = 12.8 GB: over the GPU's 3 GB, within the host's 32
    maps_budget.check_maps_fit(model, tokens)
    monkeypatch.setattr(maps_budget, "model_device", lambda model: torch.device("cuda:0"))
    with pytest.raises(InputError, match="over the 3 GB they may take here .* at most the GPU's free memory"):
        maps_budget.check_maps_fit(model, tokens)
    monkeypatch.setenv(maps_budget.ENV_MAX_MAPS, str(20 * GB))  # the operator's budget still wins
    maps_budget.check_maps_fit(model, tokens)


@pytest.mark.parametrize("n, binary, text", [
    (0, False, "0 bytes"), (1, False, "1 byte"), (999, False, "999 bytes"), (300_000, False, "300 kB"),
    (2000, False, "2 kB"), (12_800_000_000, False, "12.8 GB"), (1_999_999, False, "2 MB"), (2 * 1024**3, True, "2 GiB"),
    (2_621_440_000, True, "2.44 GiB"), (300_000, True, "293 KiB"), (5 * 10**15, False, "5,000 TB"),
])
def test_sizes_in_messages_are_never_rounded_to_zero(n, binary, text):
    """Budgets of 300 KB and 1 KB were "0.3 MB" and "0.0 GB"; 100 bytes "0.0 MB", and "about 0 tokens" fit."""
    from core.errors import size_text

    assert size_text(n, binary) == text


@pytest.mark.parametrize("needed, budget, binary, text", [
    (2_000_470_680, 2 * 10**9, False, "just over the 2 GB"),  # 1,361 SmolLM2 tokens: "2 GB, over the 2 GB"
    (1_000_200, 999_999, False, "just over the 1,000 kB"),  # "1 MB, over the 1,000 kB"
    (2**30 + 5, 2**30 - 2**18, True, "just over the 1,024 MiB"),
    (4_320_000_000, 2 * 10**9, False, "4.32 GB, over the 2 GB"),
])
def test_maps_over_a_budget_are_said_against_it_in_words_that_differ(needed, budget, binary, text):
    from core.extraction.maps_budget import over_text

    assert over_text(needed, budget, binary) == text


def test_a_budget_too_small_for_one_token_asks_for_a_larger_budget(monkeypatch):
    """ATTNSCOPE_RESULT_CACHE_BYTES=100 said "shorten it to about 0 tokens"."""
    import tiny
    from core import InputError

    monkeypatch.setenv(maps_budget.ENV_MAX_MAPS, "10")
    with pytest.raises(InputError, match="not even one token fits: raise the limit, or use"):
        maps_budget.check_maps_fit(tiny.tiny_gpt2(), 20)
