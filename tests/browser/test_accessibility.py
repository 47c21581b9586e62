"""The views AttnScope draws itself, used without a mouse (Chromium, no app server): the head view's heads are
buttons that say whether they are shown, and a token reached with Tab shows its lines alone."""

import pytest
import torch

from app.views.head_view import head_view_html

pytestmark = pytest.mark.browser


def _shown_lines(page) -> int:
    return page.locator("line.link:visible").count()


def test_the_head_view_works_from_the_keyboard(browser):
    """Its heads were spans with a click handler (no Tab, no Enter), shown or hidden by their colour alone, and a
    token's own lines showed only on mouse hover; the page had no language."""
    torch.manual_seed(0)
    attentions = torch.softmax(torch.randn(1, 3, 6, 6), dim=-1)  # (L, H, q, k)
    tokens = ["the", "cat", "sat", "on", "the", "mat"]
    page = browser.new_page()
    page.set_content(head_view_html(attentions, tokens, tokens, layer=0, head=1, title="head view"))
    assert page.locator("html").get_attribute("lang") == "en"
    heads = page.get_by_role("button")
    assert heads.count() == 3 and [heads.nth(i).get_attribute("aria-pressed") for i in range(3)] == [
        "false", "true", "false"]
    assert heads.nth(1).text_content().startswith("\u2713")  # shown: ticked, not only tinted
    alone = _shown_lines(page)
    page.keyboard.press("Tab")  # the first head's button
    page.keyboard.press("Space")
    assert heads.nth(0).get_attribute("aria-pressed") == "true" and _shown_lines(page) > alone
    page.keyboard.press("Enter")
    assert heads.nth(0).get_attribute("aria-pressed") == "false" and _shown_lines(page) == alone
    for _ in range(3):  # past the other two heads, to the first query token
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "the"
    assert 0 < _shown_lines(page) < alone  # the first query's lines alone
    page.keyboard.press("ArrowDown")  # one Tab stop per column (512 tokens were 1,024 stops): arrows within it
    assert page.evaluate("document.activeElement.textContent") == "cat"
    page.keyboard.press("Tab")  # on to the keys' column, at its first token
    focused = "[document.activeElement.textContent, document.activeElement.getAttribute('text-anchor')]"
    assert page.evaluate(focused) == ["the", "start"]
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.tagName") in ("BODY", "body")  # out of the view: two stops in all
    page.locator("text.tok").nth(4).click()  # a click moves the column's stop too (it had left a second one)
    page.keyboard.press("ArrowDown")
    assert page.locator("text.tok[tabindex='0']").all_text_contents() == ["mat", "the"]  # one per column
    page.close()


def test_a_focused_token_of_the_head_view_says_its_strongest_links_in_words(browser):
    """A token reached with Tab had role "generic" and no name: a screen reader could not tell what the lines show."""
    attentions = torch.full((1, 2, 3, 3), 0.05)  # (L, H, q, k)
    attentions[0, 0, :, 0], attentions[0, 1, :, 2] = 0.9, 0.9  # head 0 looks at "the", head 1 at "mat"
    tokens = ["the", "cat", "mat"]
    page = browser.new_page()
    page.set_content(head_view_html(attentions, tokens, tokens, layer=0, head=0, title="head view"))
    assert page.get_by_role("img", name="cat").count() == 2  # a query and a key, named before they are focused
    page.get_by_role("button").nth(1).press("Space")  # head 1 shown too
    page.locator("text.tok").nth(1).focus()  # the query "cat"
    said = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert said == "query cat; head 0: the 0.90, cat 0.05, mat 0.05; head 1: mat 0.90, the 0.05, cat 0.05"
    page.locator("text.tok").nth(3).focus()  # the key "the"
    said = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert said.startswith("key the; head 0: the 0.90, cat 0.90, mat 0.90; head 1: the 0.05")
    for head in range(2):  # both hidden
        page.get_by_role("button").nth(head).press("Enter")
    page.locator("text.tok").nth(0).focus()
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "query the; no head shown"
    page.close()


def test_a_long_token_is_cut_inside_the_head_view_and_said_whole(browser):
    """SmolLM2's 80- and 76-character "####…" tokens ran 430 px past both edges of the view, cut alike: the two
    looked the same, with nothing to say they were cut (i18n audit, stop 56)."""
    attentions = torch.full((1, 1, 4, 4), 0.25)  # (L, H, q, k)
    tokens = ["x", "#" * 80, "#" * 76, "y"]
    page = browser.new_page()
    page.set_content(head_view_html(attentions, tokens, tokens, layer=0, head=0, title="head view"))
    width = page.evaluate("document.getElementById('view').getBoundingClientRect().width")
    for i in range(8):
        box = page.locator("text.tok").nth(i).bounding_box()
        assert 0 <= box["x"] and box["x"] + box["width"] <= width, (i, box)
    cut = page.locator("text.tok").nth(1)
    assert cut.evaluate("e => e.firstChild.textContent") == "#" * 19 + "\u2026"
    assert cut.get_attribute("aria-label") == "#" * 80 and cut.locator("title").text_content() == "#" * 80
    assert page.locator("text.tok").nth(2).locator("title").text_content() == "#" * 76
    assert page.locator("text.tok").nth(0).locator("title").count() == 0  # a short token has no tooltip
    page.close()
