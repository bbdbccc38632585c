package main

import "testing"

func TestVerify(t *testing.T) {
	const step, world, n = 4, 3, 100
	sum := func() []int64 {
		v := make([]int64, n)
		for r := range world {
			part := make([]int64, n)
			fill(part, step, r)
			for i := range v {
				v[i] += part[i]
			}
		}
		return v
	}
	tests := []struct {
		name   string
		v      func() []int64
		step   int64
		world  int
		wantAt int
	}{
		{"the exact sum passes", sum, step, world, -1},
		{"one element off is found", func() []int64 { v := sum(); v[42]++; return v }, step, world, 42},
		{"a chunk of another step is found", func() []int64 {
			v, other := sum(), make([]int64, n)
			fill(other, step+1, 0)
			copy(v[10:20], other[10:20])
			return v
		}, step, world, 10},
		{"a sum over too few ranks is found", sum, step, world + 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := verify(tt.v(), tt.step, tt.world); got != tt.wantAt {
				t.Errorf("verify = %d, want %d", got, tt.wantAt)
			}
		})
	}
}
