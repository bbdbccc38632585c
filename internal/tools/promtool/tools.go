//go:build tools

// Package promtool pins Prometheus' promtool (github.com/prometheus/prometheus)
// in a module of its own, apart from the main module's dependencies: the
// metrics tests build it once into the user's cache directory and run
// `promtool check metrics` on every component's /metrics with it.
package promtool

import _ "github.com/prometheus/prometheus/cmd/promtool"
