package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// output writes the machine-readable lines on stdout, one JSON object per
// line, for the demo's live view, the benchmarks and the tests.
type output struct {
	mu  sync.Mutex
	enc *json.Encoder
	now func() time.Time
}

func newOutput(w io.Writer) *output {
	return &output{enc: json.NewEncoder(w), now: time.Now}
}

// stepLine is printed for every step this rank completed (or, with
// SumOK false, for the step whose sum was wrong, just before exiting 1).
type stepLine struct {
	Step       int64   `json:"step"`
	Generation int64   `json:"generation"`
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	SumOK      bool    `json:"sum_ok"`
	T          float64 `json:"t"`
}

// ringLine is printed every time this rank has formed a ring and agreed
// with it on the step to go on from.
type ringLine struct {
	Event      string  `json:"event"`
	Generation int64   `json:"generation"`
	Rank       int     `json:"rank"`
	World      int     `json:"world"`
	T          float64 `json:"t"`
}

func (o *output) step(step, generation int64, rank, world int, sumOK bool) {
	o.write(stepLine{Step: step, Generation: generation, Rank: rank, World: world, SumOK: sumOK, T: o.unix()})
}

func (o *output) ring(generation int64, rank, world int) {
	o.write(ringLine{Event: "ring", Generation: generation, Rank: rank, World: world, T: o.unix()})
}

func (o *output) unix() float64 {
	return float64(o.now().UnixMicro()) / 1e6
}

func (o *output) write(v any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.enc.Encode(v) //nolint:errcheck // a closed stdout must not stop training
}
