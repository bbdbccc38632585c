package bench

import (
	"fmt"

	"github.com/ringside/ringside/internal/localjob"
)

// ledger checks, over every step line of a job, the promises a partition
// must keep: a step is completed in one generation only (two would be a
// job split in two, each side training, or a committed step lost and done
// again), and the members of a generation agree on it (one world size,
// each rank held by one member). Feed it every line (Tracker.Observe).
type ledger struct {
	stepGen  map[int64]int64 // the generation each step completed in
	gens     map[int64]*genView
	twice    []string // steps completed in two generations
	disagree []string // generations whose members disagree
}

// genView is what a generation's members said of it.
type genView struct {
	world  int
	rankOf map[string]int
	holder map[int]string
	bad    bool
}

func newLedger() *ledger {
	return &ledger{stepGen: map[int64]int64{}, gens: map[int64]*genView{}}
}

func (l *ledger) add(line localjob.Line) {
	if g, ok := l.stepGen[line.Step]; !ok {
		l.stepGen[line.Step] = line.Generation
	} else if g != line.Generation {
		l.twice = append(l.twice, fmt.Sprintf("step %d completed in generations %d and %d (%s)", line.Step, g, line.Generation, line.Worker))
		l.stepGen[line.Step] = max(g, line.Generation) // report each further generation once
	}
	v, ok := l.gens[line.Generation]
	if !ok {
		v = &genView{world: line.World, rankOf: map[string]int{}, holder: map[int]string{}}
		l.gens[line.Generation] = v
	}
	if v.bad {
		return
	}
	var why string
	switch r, seen := v.rankOf[line.Worker]; {
	case line.World != v.world:
		why = fmt.Sprintf("%s trains at world size %d, others at %d", line.Worker, line.World, v.world)
	case line.Rank < 0 || line.Rank >= line.World:
		why = fmt.Sprintf("%s holds rank %d of %d", line.Worker, line.Rank, line.World)
	case seen && r != line.Rank:
		why = fmt.Sprintf("%s holds ranks %d and %d", line.Worker, r, line.Rank)
	case v.holder[line.Rank] != "" && v.holder[line.Rank] != line.Worker:
		why = fmt.Sprintf("rank %d held by %s and %s", line.Rank, v.holder[line.Rank], line.Worker)
	}
	if why != "" {
		v.bad = true
		l.disagree = append(l.disagree, fmt.Sprintf("generation %d: %s", line.Generation, why))
		return
	}
	v.rankOf[line.Worker], v.holder[line.Rank] = line.Rank, line.Worker
}
