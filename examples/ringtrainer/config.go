package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// Config is what one trainer process runs with.
type Config struct {
	// Socket is the sidecar's trainer API: a unix socket path or an
	// http:// URL. The default is the sidecar's default socket.
	Socket string
	// LocalRank is which of the member's slots this process is (torchrun's
	// LOCAL_RANK); global rank = the member's first rank + LocalRank.
	LocalRank int
	// Port is the data port base: a rank listens on its member's address
	// at Port+LocalRank, and every trainer of the job must use the same
	// base. 29700 stays clear of the sidecar's rotating master ports
	// (29500 and the 16 after it).
	Port int
	// Vector is the number of int64 elements all-reduced every step.
	// 4096 (32 KiB) keeps the ring's time small next to StepTime, so
	// steps per second measure coordination, not bandwidth.
	Vector int
	// StepTime is the simulated compute of one step. 50 ms gives 20
	// steps per second: enough resolution to time a recovery.
	StepTime time.Duration
	// CommCostPerWorker models communication that grows with the ring:
	// every step takes this much longer per rank beyond the first, so a
	// step at world size n lasts StepTime + (n-1)*CommCostPerWorker and
	// the job's samples per second, n/(StepTime + (n-1)*CommCostPerWorker),
	// stops growing linearly (the curve an autoscaler must find the knee
	// of). 0, the default, keeps the ring's real cost only.
	CommCostPerWorker time.Duration
	// Slow multiplies this trainer's simulated compute (StepTime) from
	// step SlowFrom on, as a throttled GPU or a noisy neighbour would:
	// the straggler of `ringside bench straggler`. 1, the default, is a
	// healthy trainer.
	Slow     float64
	SlowFrom int64
	// Steps ends the run once the job's step counter reaches it; 0 trains
	// until drained.
	Steps int64
	// ConnectTimeout is how long the sidecar may stay unreachable: at
	// start, where the sidecar container may come up after this one, and
	// later. 30 s covers a sidecar's start against a cold etcd.
	ConnectTimeout time.Duration
	// LogLevel and LogFormat shape the logs on stderr, as ringside's own.
	LogLevel  string
	LogFormat string
}

// maxVector bounds --vector at 128 MiB of int64s per buffer.
const maxVector = 1 << 24

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Socket:         api.DefaultSocket,
		Port:           29700,
		Vector:         4096,
		StepTime:       50 * time.Millisecond,
		Slow:           1,
		ConnectTimeout: 30 * time.Second,
		LogLevel:       "info",
		LogFormat:      "text",
	}
}

// parseFlags reads the flags over the defaults and the environment
// (RINGSIDE_SOCKET, LOCAL_RANK, RINGSIDE_LOG_LEVEL, RINGSIDE_LOG_FORMAT).
// It returns flag.ErrHelp after printing the usage for -h.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	cfg := DefaultConfig()
	for env, dst := range map[string]*string{
		"RINGSIDE_SOCKET": &cfg.Socket, "RINGSIDE_LOG_LEVEL": &cfg.LogLevel, "RINGSIDE_LOG_FORMAT": &cfg.LogFormat,
	} {
		if v := getenv(env); v != "" {
			*dst = v
		}
	}
	if v := getenv("LOCAL_RANK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return cfg, fmt.Errorf("LOCAL_RANK=%q: want a slot number (0, 1, ...)", v)
		}
		cfg.LocalRank = n
	}

	fs := flag.NewFlagSet("ringtrainer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "the sidecar's trainer API socket (env RINGSIDE_SOCKET)")
	fs.IntVar(&cfg.LocalRank, "local-rank", cfg.LocalRank, "which of the member's slots this process is (env LOCAL_RANK)")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "data port base: this rank listens on its member's address at port+local-rank")
	fs.IntVar(&cfg.Vector, "vector", cfg.Vector, "int64 elements all-reduced every step")
	fs.DurationVar(&cfg.StepTime, "step-time", cfg.StepTime, "simulated compute per step")
	fs.DurationVar(&cfg.CommCostPerWorker, "comm-cost-per-worker", cfg.CommCostPerWorker, "simulated communication per step for each rank beyond the first: a step takes step-time + (world-1) x this")
	fs.Float64Var(&cfg.Slow, "slow", cfg.Slow, "multiply this trainer's simulated compute (--step-time) by this from step --slow-from on: a straggler (1: healthy)")
	fs.Int64Var(&cfg.SlowFrom, "slow-from", cfg.SlowFrom, "the first step that --slow slows")
	fs.Int64Var(&cfg.Steps, "steps", cfg.Steps, "stop once the job reaches this step (0: train until drained)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "how long the sidecar may be unreachable before exiting with 3")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log level: debug, info, warn or error (env RINGSIDE_LOG_LEVEL)")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "log format: text or json (env RINGSIDE_LOG_FORMAT)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "Usage: ringtrainer [flags]\n\nA ring all-reduce trainer that takes its rank from the ringside sidecar.\n\nFlags:")
			fs.PrintDefaults()
			return cfg, err
		}
		return cfg, fmt.Errorf("%w (see --help)", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: ringtrainer takes flags only", fs.Arg(0))
	}
	return cfg, cfg.Validate()
}

// Validate names every field that is out of range.
func (c Config) Validate() error {
	var errs []error
	if c.Socket == "" {
		errs = append(errs, errors.New("--socket is empty: set it (or RINGSIDE_SOCKET) to the sidecar's API socket"))
	}
	if c.LocalRank < 0 {
		errs = append(errs, fmt.Errorf("--local-rank %d: want 0 or more", c.LocalRank))
	}
	if c.Port < 1 || c.Port+max(c.LocalRank, 0) > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: port+local-rank must be a TCP port (1-65535)", c.Port))
	}
	if c.Vector < 1 || c.Vector > maxVector {
		errs = append(errs, fmt.Errorf("--vector %d: want 1 to %d elements", c.Vector, maxVector))
	}
	if c.StepTime < 0 {
		errs = append(errs, fmt.Errorf("--step-time %s: want 0 or more", c.StepTime))
	}
	if c.CommCostPerWorker < 0 {
		errs = append(errs, fmt.Errorf("--comm-cost-per-worker %s: want 0 or more", c.CommCostPerWorker))
	}
	if !(c.Slow >= 1 && c.Slow <= 100) { // NaN fails both
		errs = append(errs, fmt.Errorf("--slow %g: want a factor from 1 (healthy) to 100", c.Slow))
	}
	if c.SlowFrom < 0 {
		errs = append(errs, fmt.Errorf("--slow-from %d: want a step, 0 or more", c.SlowFrom))
	}
	if c.Steps < 0 {
		errs = append(errs, fmt.Errorf("--steps %d: want 0 (forever) or more", c.Steps))
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--connect-timeout %s: want more than 0", c.ConnectTimeout))
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.LogFormat))
	}
	return errors.Join(errs...)
}

// computeTime is the simulated time of step at world size world: the
// compute (slowed by Slow from SlowFrom on), plus the communication that
// grows with the ring.
func (c Config) computeTime(world int, step int64) time.Duration {
	compute := c.StepTime
	if c.Slow > 1 && step >= c.SlowFrom {
		compute = time.Duration(float64(compute) * c.Slow)
	}
	return compute + time.Duration(max(world-1, 0))*c.CommCostPerWorker
}

// newLogger returns the stderr logger of a validated cfg.
func newLogger(cfg Config, stderr io.Writer) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(cfg.LogLevel)) //nolint:errcheck // validated
	opts := &slog.HandlerOptions{Level: l}
	var h slog.Handler = slog.NewTextHandler(stderr, opts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(stderr, opts)
	}
	return slog.New(h).With("local_rank", cfg.LocalRank)
}
