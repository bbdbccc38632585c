package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// FuzzSidecarFlags sets one of the sidecar's flags from the environment
// (RINGSIDE_<FLAG>, how a pod spec configures it) to any value, parses any
// command line and any --node-labels value: nothing may panic, and a value
// refused is an error naming its variable.
func FuzzSidecarFlags(f *testing.F) {
	f.Add(uint8(0), "llama", "--slots\x008", "zone=a,rack=r1")
	f.Add(uint8(7), "99999999999999999999", "--gossip-key\x00a,b", "=x")
	f.Add(uint8(20), "1e18", "--api-allow-uids\x00-1,x", "k=v,,")
	f.Fuzz(func(t *testing.T, which uint8, value, args, labels string) {
		cmd := newSidecarCmd()
		fs := cmd.Flags()
		var names []string
		fs.VisitAll(func(fl *pflag.Flag) { names = append(names, fl.Name) })
		name := names[int(which)%len(names)]
		key := "RINGSIDE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if strings.ContainsRune(value, 0) {
			return // an environment value holds no NUL
		}
		t.Setenv(key, value)
		if err := fs.Parse(strings.Split(args, "\x00")); err != nil {
			return
		}
		if err := flagsFromEnv(fs); err != nil && !strings.Contains(err.Error(), key) {
			t.Fatalf("flagsFromEnv: %v does not name %s", err, key)
		}
		if m, err := parseLabels(labels); err == nil {
			for k := range m {
				if k == "" {
					t.Fatalf("parseLabels(%q) took an empty key", labels)
				}
			}
		}
	})
}
