package main

import (
	"context"
	"errors"
	"testing"
)

func TestGenerations(t *testing.T) {
	tests := []struct {
		name    string
		before  []int64 // seen before entering generation 5
		during  []int64 // seen while training it
		aborted bool
	}{
		{"nothing newer keeps training", []int64{3, 5}, []int64{4, 5}, false},
		{"a newer generation announced during training aborts it", []int64{5}, []int64{6}, true},
		{"a newer generation known before entering aborts at once", []int64{6}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g generations
			for _, n := range tt.before {
				g.saw(n)
			}
			ctx, leave := g.enter(context.Background(), 5)
			defer leave()
			for _, n := range tt.during {
				g.saw(n)
			}
			if got := ctx.Err() != nil; got != tt.aborted {
				t.Fatalf("aborted = %v, want %v", got, tt.aborted)
			}
			if tt.aborted && !errors.Is(context.Cause(ctx), errNewGeneration) {
				t.Errorf("cause %v, want errNewGeneration", context.Cause(ctx))
			}
		})
	}
}

func TestGenerationsLeaveDoesNotClearTheNextAbort(t *testing.T) {
	var g generations
	_, leave5 := g.enter(context.Background(), 5)
	leave5()
	ctx6, leave6 := g.enter(context.Background(), 6)
	defer leave6()
	leave5() // a late second call must not disarm generation 6
	g.saw(7)
	if ctx6.Err() == nil {
		t.Fatal("generation 6 was not aborted by generation 7")
	}
}
