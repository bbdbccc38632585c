package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestDemoRunsToTheEnd(t *testing.T) {
	var out bytes.Buffer
	cfg := DefaultConfig()
	cfg.TTL = 2 * time.Second
	cfg.Settle = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Run(ctx, &out, cfg); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{"generation 1:", "leave w", "drain w0", "summary: 4 generations, final world size 4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
