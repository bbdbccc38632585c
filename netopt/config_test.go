package netopt

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fieldErrors returns the fields Validate named, in order, and fails on
// an error that is not a *FieldError.
func fieldErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	return fields
}

func TestConfigValidateNamesEveryBadField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		fields []string
		msg    string
	}{
		{"the defaults", func(*Config) {}, nil, ""},
		{"tc and sl at their bounds", func(c *Config) { c.IBTrafficClass, c.IBServiceLevel = 255, 15 }, nil, ""},
		{"unknown fabric", func(c *Config) { c.Fabric = "torus" }, []string{"Fabric"}, `fabric must be auto, rail or flat, got "torus"`},
		{"traffic class above 255", func(c *Config) { c.IBTrafficClass = 256 }, []string{"IBTrafficClass"}, "IB traffic class must be 0-255 (or -1 to leave it unset), got 256"},
		{"service level below -1", func(c *Config) { c.IBServiceLevel = -2 }, []string{"IBServiceLevel"}, "IB service level must be 0-15 (or -1 to leave it unset), got -2"},
		{"every field at once", func(c *Config) { c.SysfsRoot, c.Fabric, c.IBTrafficClass, c.IBServiceLevel = "", "x", 300, 16 },
			[]string{"SysfsRoot", "Fabric", "IBTrafficClass", "IBServiceLevel"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if diff := cmp.Diff(tt.fields, fieldErrors(t, err)); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Errorf("error %q, want %q", err, tt.msg)
			}
		})
	}
}

func TestConfigValidateChecksTheCostModel(t *testing.T) {
	c := DefaultConfig()
	c.Cost.Bytes = 0
	if err := c.Validate(); err == nil || err.Error() != "cost model: bytes must be positive, got 0" {
		t.Errorf("got %v", err)
	}
}
