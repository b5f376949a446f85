# approval-bot: a small image that runs `approval-bot serve` as an unprivileged user.
#
#   docker build -t approval-bot .
#   docker run --rm -p 3000:3000 --env-file bot.env approval-bot
#
# Configuration: mount a TOML file and point APPROVAL_BOT_CONFIG at it; secrets and
# DATABASE_URL come from the environment (see docs/deploy.md). Your tools and llm plugins
# are Python packages: build your own image FROM this one and pip install them.

ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the package is built from (.dockerignore keeps the rest out of the context).
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY storage ./storage
COPY playground ./playground
RUN python -m venv /opt/approval-bot \
    && /opt/approval-bot/bin/pip install . \
    && find /opt/approval-bot -name '__pycache__' -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 approval-bot \
    && useradd --system --uid 10001 --gid approval-bot --home-dir /var/lib/approval-bot \
       --create-home --shell /usr/sbin/nologin approval-bot
COPY --from=build /opt/approval-bot /opt/approval-bot
ENV PATH=/opt/approval-bot/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    APPROVAL_BOT_LOG_FORMAT=json \
    LLM_USER_PATH=/var/lib/approval-bot/llm
USER 10001:10001
WORKDIR /var/lib/approval-bot
EXPOSE 3000
# SIGTERM (docker stop, Kubernetes) starts the graceful shutdown; keep `shutdown_grace`
# under the stop timeout (docker stop -t, terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["approval-bot"]
CMD ["serve", "--host", "0.0.0.0", "--port", "3000"]
