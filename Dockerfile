# The ringside image: one static binary, `ringside <command>` for the
# controller, the webhook, etcd and the injected sidecar.
#
#   docker build -t ringside:0.1.0 .
#
# The final stage is scratch: no shell, no libc, no package manager. It
# runs as uid 65532 by default; the injected sidecar alone overrides that
# to uid 0 with only NET_ADMIN (its dead-peer socket reset needs the
# capability in the pod's network namespace, which a non-root uid cannot
# hold without file capabilities; see webhook/).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change reuses the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/ringside ./cmd/ringside \
 && mkdir -p /out/tmp && chmod 1777 /out/tmp

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tmp /tmp
COPY --from=build /out/ringside /usr/local/bin/ringside
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ringside"]
