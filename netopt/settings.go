package netopt

import (
	"context"
	"fmt"
)

// Setting is one NCCL environment variable and why it has this value.
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Reason string `json:"reason"`
}

// Settings is what Recommend chose for one node.
type Settings struct {
	// Env lists the variables in a fixed order: interface, transport, HCAs,
	// GID, traffic class, GPUDirect, cross-NIC.
	Env []Setting `json:"env"`
	// Warnings are the misconfigurations that will cost bandwidth, and the
	// sysfs files detection skipped.
	Warnings []string `json:"warnings,omitempty"`
}

// Map returns the variables as a map, the form the sidecar hands trainers in
// the rendezvous answer.
func (s Settings) Map() map[string]string {
	m := make(map[string]string, len(s.Env))
	for _, e := range s.Env {
		m[e.Name] = e.Value
	}
	return m
}

// Lookup returns the value of one variable and whether it is set.
func (s Settings) Lookup(name string) (string, bool) {
	for _, e := range s.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// Tune detects the node and recommends its settings: what the sidecar calls
// once at start to fill the NCCL variables of the rendezvous answer
// (Tune(ctx, cfg).Map()).
func Tune(ctx context.Context, cfg Config) (Settings, error) {
	if err := cfg.Validate(); err != nil {
		return Settings{}, fmt.Errorf("netopt config: %w", err)
	}
	h, err := Detect(ctx, cfg)
	if err != nil {
		return Settings{}, err
	}
	return Recommend(h, cfg), nil
}

// recommendation accumulates settings and warnings.
type recommendation struct {
	Settings
}

func (r *recommendation) set(name, value, reason string) {
	r.Env = append(r.Env, Setting{Name: name, Value: value, Reason: reason})
}

func (r *recommendation) warn(w string) { r.Warnings = append(r.Warnings, w) }

// Recommend chooses NCCL settings for the host. It never sets a variable it
// cannot justify from what was detected: where the evidence is missing or
// contradicts itself, the variable stays unset (NCCL's default) and a
// warning says why. cfg must be valid (see Config.Validate).
func Recommend(h *Host, cfg Config) Settings {
	r := &recommendation{}
	r.Warnings = append(r.Warnings, h.Warnings...)
	chooseSocketInterface(r, h)
	ports, note := chooseRDMAPorts(r, h)
	if len(ports) > 0 {
		chooseIB(r, h, cfg, ports, note)
	} else if cfg.IBTrafficClass >= 0 || cfg.IBServiceLevel >= 0 {
		r.warn("IB traffic class / service level asked for, but no RDMA port is usable here: not set")
	}
	return r.Settings
}
