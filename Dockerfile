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
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION}" \
      -o /out/alloctrack ./cmd/alloctrack

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/alloctrack /usr/local/bin/alloctrack
USER nonroot:nonroot
EXPOSE 9853
ENTRYPOINT ["/usr/local/bin/alloctrack", "serve"]
