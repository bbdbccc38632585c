package preempt

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalidConfig is wrapped by every error Watch returns for a bad Config.
var ErrInvalidConfig = errors.New("preempt: invalid config")

// Config says which Node Watch watches and which taints end its wait.
type Config struct {
	// NodeName is the name of the Node the sidecar runs on. Set it from the
	// downward API (fieldRef spec.nodeName); the pod cannot tell otherwise.
	NodeName string

	// Taints are the taint keys that mean the node is going away; any one of
	// them, with any value and effect, triggers the callback. Default:
	// DefaultTaints(). Append to it rather than replace it, unless a key on
	// it means something else in your cluster.
	Taints []string

	// Resync is how often the informer replays its cached copy of the node to
	// the handler; 0 turns replays off. Default 0: a replay re-reads the
	// cache, not the API server, so it cannot catch a change the watch
	// missed (the informer relists by itself after a broken watch).
	Resync time.Duration

	// Logger receives the package's few log lines (a watch error, the
	// taint found). Pass one that already carries job and member attributes.
	// Default slog.Default(); nil means the same.
	Logger *slog.Logger
}

// DefaultConfig returns the Config for watching nodeName for DefaultTaints.
func DefaultConfig(nodeName string) Config {
	return Config{
		NodeName: nodeName,
		Taints:   DefaultTaints(),
		Resync:   0,
		Logger:   slog.Default(),
	}
}

// Validate reports what is wrong with c, if anything, in an error wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("%w: node name is empty; set it from the downward API (spec.nodeName)", ErrInvalidConfig)
	}
	if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
		return fmt.Errorf("%w: node name %q: %s", ErrInvalidConfig, c.NodeName, strings.Join(errs, "; "))
	}
	if len(c.Taints) == 0 {
		return fmt.Errorf("%w: no taints to watch for; start from DefaultTaints()", ErrInvalidConfig)
	}
	for i, key := range c.Taints {
		if key == "" {
			return fmt.Errorf("%w: taint %d is an empty key", ErrInvalidConfig, i)
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return fmt.Errorf("%w: taint key %q: %s", ErrInvalidConfig, key, strings.Join(errs, "; "))
		}
	}
	if c.Resync < 0 {
		return fmt.Errorf("%w: resync %v is negative; use 0 to turn resyncs off", ErrInvalidConfig, c.Resync)
	}
	return nil
}

// logger returns c.Logger, or slog.Default() when it is nil.
func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}
