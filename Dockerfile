# mha-viz as a public demo: slim Python, CPU-only torch, non-root user, port 8501.
#   docker build -t mha-viz . && docker run -p 8501:8501 mha-viz
# Models: the allow-list below decides alone (the two bundled models, offline). To let links name other hub
# models, run with -e MHA_VIZ_ALLOWED_MODELS= -e MHA_VIZ_MAX_MODEL_MB=500 -e HF_HUB_OFFLINE=0: a model's files
# (from the hub's sizes, or the cache's) are then checked against that many MB before anything is downloaded.
# A public demo with neither an allow-list nor MHA_VIZ_MAX_MODEL_MB loads only the bundled models.
FROM python:3.11-slim

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV MHA_VIZ_VENV=/opt/venv \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    MHA_VIZ_PUBLIC=1 \
    MHA_VIZ_ALLOWED_MODELS=bundled,mha-viz/induction-2l \
    PORT=8501

RUN useradd --create-home --uid 1000 app
WORKDIR /home/app/mha-viz
COPY --chown=app:app . .
RUN TORCH_INDEX_URL="$TORCH_INDEX_URL" bash scripts/install.sh && chown -R app:app /opt/venv

USER app
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s CMD ["/opt/venv/bin/python", "scripts/healthcheck.py"]
CMD ["bash", "scripts/serve.sh"]
