package bench

import (
	"testing"

	"github.com/ringside/ringside/internal/localjob"
)

func TestLedgerFindsWhatAPartitionMustNeverDo(t *testing.T) {
	step := func(worker string, step, gen int64, rank, world int) localjob.Line {
		return localjob.Line{Worker: worker, Step: step, Generation: gen, Rank: rank, World: world, SumOK: true}
	}
	for _, tc := range []struct {
		name               string
		lines              []localjob.Line
		twice, disagreeing int
	}{
		{"a job that re-forms and goes on from its last step keeps every promise", []localjob.Line{
			step("w0", 1, 1, 0, 2), step("w1", 1, 1, 1, 2), step("w0", 2, 2, 0, 1), step("w0", 3, 2, 0, 1),
		}, 0, 0},
		{"two sides training the same steps in two generations are a split", []localjob.Line{
			step("w0", 5, 3, 0, 2), step("w1", 5, 3, 1, 2), step("w2", 5, 4, 0, 1), step("w2", 6, 4, 0, 1), step("w0", 6, 3, 0, 2),
		}, 2, 0},
		{"a generation that starts again below a committed step lost it", []localjob.Line{
			step("w0", 7, 1, 0, 1), step("w0", 7, 2, 0, 1),
		}, 1, 0},
		{"members at different world sizes in one generation disagree", []localjob.Line{
			step("w0", 1, 1, 0, 2), step("w1", 1, 1, 1, 3),
		}, 0, 1},
		{"two members holding one rank disagree", []localjob.Line{
			step("w0", 1, 1, 1, 2), step("w1", 1, 1, 1, 2),
		}, 0, 1},
		{"a member holding two ranks disagrees", []localjob.Line{
			step("w0", 1, 1, 0, 2), step("w0", 2, 1, 1, 2),
		}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger()
			for _, line := range tc.lines {
				l.add(line)
			}
			if len(l.twice) != tc.twice || len(l.disagree) != tc.disagreeing {
				t.Errorf("steps in two generations %q, disagreements %q; want %d and %d", l.twice, l.disagree, tc.twice, tc.disagreeing)
			}
		})
	}
}
