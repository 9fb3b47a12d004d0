# syntax=docker/dockerfile:1
# One image for every relay service; the command picks the service
# (`relay serve`, `relay ingest`, `relay agent`, ...).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/relay ./cmd/relay

# Node is in the runtime image so the tool runner can start stdio MCP servers
# published on npm (npx -y @modelcontextprotocol/server-...).
FROM node:22-bookworm-slim
RUN useradd --system --create-home --home-dir /home/relay relay \
 && mkdir -p /data && chown relay /data
COPY --from=build /out/relay /usr/local/bin/relay
USER relay
WORKDIR /home/relay
ENV RELAY_DATA_DIR=/data RELAY_HTTP_ADDR=:8080
EXPOSE 8080
VOLUME /data
HEALTHCHECK --interval=10s --timeout=4s --start-period=10s CMD ["relay", "healthcheck"]
ENTRYPOINT ["relay"]
CMD ["serve"]
