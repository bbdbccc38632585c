package preempt

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := DefaultConfig(testNode)
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // a fragment of the message; "" means valid
	}{
		{"the default config is valid", func(*Config) {}, ""},
		{"a fully qualified node name is valid", func(c *Config) { c.NodeName = "ip-10-0-1-23.ec2.internal" }, ""},
		{"a custom taint list is valid", func(c *Config) { c.Taints = []string{"example.com/reclaim"} }, ""},
		{"a nil logger is valid", func(c *Config) { c.Logger = nil }, ""},
		{"a positive resync is valid", func(c *Config) { c.Resync = time.Minute }, ""},
		{"an empty node name says where to get one", func(c *Config) { c.NodeName = "" }, "spec.nodeName"},
		{"a node name with a space is rejected", func(c *Config) { c.NodeName = "node a" }, `node name "node a"`},
		{"an empty taint list says where to start", func(c *Config) { c.Taints = nil }, "DefaultTaints()"},
		{"an empty taint key is rejected by position", func(c *Config) { c.Taints = append(c.Taints, "") }, "empty key"},
		{"a malformed taint key is rejected", func(c *Config) { c.Taints = []string{"to be deleted"} }, `taint key "to be deleted"`},
		{"a negative resync is rejected", func(c *Config) { c.Resync = -time.Second }, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			cfg.Taints = DefaultTaints()
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestDefaultTaintsAreFreshValidKeys(t *testing.T) {
	t.Parallel()
	a := DefaultTaints()
	seen := map[string]bool{}
	for _, key := range a {
		if seen[key] {
			t.Errorf("DefaultTaints lists %q twice", key)
		}
		seen[key] = true
	}
	if err := (Config{NodeName: testNode, Taints: a}).Validate(); err != nil {
		t.Errorf("DefaultTaints does not validate: %v", err)
	}
	a[0] = "changed"
	if DefaultTaints()[0] == "changed" {
		t.Error("DefaultTaints returned a shared slice; a caller's edit leaked into the next call")
	}
}
