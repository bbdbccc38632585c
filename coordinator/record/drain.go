package record

import (
	"encoding/json"
	"fmt"
	"math"
)

// Drains are how long the job's members took to drain, stored under
// DrainsKey without a lease (a drained member's keys are gone with its
// lease, its figure must outlive it): each draining member appends its
// own, in a compare-and-swap on the key's revision, and the oldest fall
// out past MaxDrainSamples. The controller reads them to size the
// workers' termination grace period.
type Drains struct {
	// Seconds are the drains' durations, oldest first: from the drain's
	// start (SIGTERM, a taint, a notice) to the generation without the
	// member, or to the end of the sidecar's grace when none came in time
	// (then the figure is the grace: the drain needed at least that).
	Seconds []float64 `json:"seconds"`
}

// MaxDrainSamples bounds Drains.Seconds: the newest 64 drains give a
// 99th percentile that is their slowest, which is what a grace period
// must cover, and keep the key small however many pods come and go.
const MaxDrainSamples = 64

// maxDrainSeconds bounds one figure: a day is far past any grace period.
const maxDrainSeconds = 86400

// Add returns d with seconds appended and the oldest dropped past
// MaxDrainSamples; d is not modified.
func (d Drains) Add(seconds float64) Drains {
	out := append(append([]float64(nil), d.Seconds...), seconds)
	if n := len(out) - MaxDrainSamples; n > 0 {
		out = out[n:]
	}
	return Drains{Seconds: out}
}

// Validate reports what is wrong with d.
func (d Drains) Validate() error {
	if len(d.Seconds) > MaxDrainSamples {
		return fmt.Errorf("%d drain durations, more than %d", len(d.Seconds), MaxDrainSamples)
	}
	for i, s := range d.Seconds {
		if math.IsNaN(s) || s < 0 || s > maxDrainSeconds {
			return fmt.Errorf("drain duration %d is %v s, want 0-%d", i, s, maxDrainSeconds)
		}
	}
	return nil
}

// DecodeDrains decodes and checks the value of DrainsKey.
func DecodeDrains(value []byte) (Drains, error) {
	var d Drains
	if err := json.Unmarshal(value, &d); err != nil {
		return Drains{}, fmt.Errorf("malformed drains: %w", err)
	}
	if err := d.Validate(); err != nil {
		return Drains{}, fmt.Errorf("malformed drains: %w", err)
	}
	return d, nil
}
