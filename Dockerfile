# alloctrack: a static binary in a minimal image, running as a non-root user.
# Build:  docker build -t alloctrack .
# Run (the adb server on the host, started with `adb -a nodaemon server` so it
# listens beyond loopback, or reached through host networking):
#   docker run --rm --network host alloctrack --adb.address 127.0.0.1:5037
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version comes from git (the build context includes .git), like `make
# build`; --build-arg VERSION=… or REVISION=… override it.
ARG VERSION=
ARG REVISION=
RUN set -e; v=github.com/prometheus/common/version; \
    version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}"; \
    revision="${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)}"; \
    branch="$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)"; \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X $v.Version=$version -X $v.Revision=$revision -X $v.Branch=$branch -X $v.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X $v.BuildUser=docker" \
      -o /out/alloctrack ./cmd/alloctrack && /out/alloctrack --version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/alloctrack /usr/local/bin/alloctrack
USER nonroot:nonroot
EXPOSE 9853
ENTRYPOINT ["/usr/local/bin/alloctrack", "serve"]
