package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The generation register: the leader writes generations, sidecars read
// them from their watches. Its state is the generations committed so far,
// in order; a write must carry a number above the last one (at most one
// generation per number, numbers only grow), and a read must return a
// generation that was committed with exactly those members (no sidecar
// serves a generation that etcd never held, or one that differs from what
// it held under that number).
//
// A watch delivery is not a linearizable read: a sidecar may hand out a
// generation after a newer one was committed. The read is therefore legal
// against any generation committed before it, not only the newest.

// genOp is the input of one operation of the register.
type genOp struct {
	write   bool
	number  int64
	members string // the ids in ring order, comma-joined
	who     string
}

// genEntry is one committed generation of the register's state.
type genEntry struct {
	number  int64
	members string
}

// registerModel is the porcupine model of the generation register. Its
// state is a []genEntry that Step never modifies in place.
var registerModel = porcupine.Model{
	Init: func() any { return []genEntry(nil) },
	Step: func(state, input, _ any) (bool, any) {
		st, op := state.([]genEntry), input.(genOp)
		if op.write {
			if len(st) > 0 && op.number <= st[len(st)-1].number {
				return false, st
			}
			return true, append(slices.Clip(st), genEntry{op.number, op.members})
		}
		for _, e := range st {
			if e.number == op.number {
				return e.members == op.members, st
			}
		}
		return false, st
	},
	Equal: func(a, b any) bool { return slices.Equal(a.([]genEntry), b.([]genEntry)) },
	DescribeOperation: func(input, _ any) string {
		op := input.(genOp)
		if op.write {
			return fmt.Sprintf("%s commits %d [%s]", op.who, op.number, op.members)
		}
		return fmt.Sprintf("%s sees %d [%s]", op.who, op.number, op.members)
	},
}

// registerOps turns the history into the register's operations. Commits
// are sequential, in etcd's revision order, each spanning from the
// previous one's observation to its own. A delivery spans from when the
// sidecar sent it to when it was read, widened to when the recorder's own
// watch observed that generation: the recorder's watch may lag a
// sidecar's, and a read must not fail for the recorder's lateness.
func registerOps(h History) []porcupine.Operation {
	at := func(t time.Time) int64 { return t.Sub(h.Start).Nanoseconds() }
	var ops []porcupine.Operation
	observed := map[int64]int64{}
	prev := int64(-1)
	for _, c := range h.Commits {
		call := prev + 1
		ret := max(at(c.Observed), call+1)
		prev = ret
		if _, seen := observed[c.Number]; !seen {
			observed[c.Number] = ret
		}
		ops = append(ops, porcupine.Operation{ClientId: 0, Call: call, Return: ret,
			Input: genOp{write: true, number: c.Number, members: strings.Join(c.Members, ","), who: c.Leader}})
	}
	clients := map[string]int{}
	for _, d := range h.Deliveries {
		id, ok := clients[d.Worker]
		if !ok {
			id = len(clients) + 1
			clients[d.Worker] = id
		}
		call := min(at(d.Sent), at(d.Received))
		ret := max(at(d.Received), observed[d.Number], call) + 1
		ops = append(ops, porcupine.Operation{ClientId: id, Call: call, Return: ret,
			Input: genOp{number: d.Number, members: strings.Join(d.Members, ","), who: d.Worker}})
	}
	return ops
}

// checkRegister runs porcupine on the history; it reports whether the
// history is linearizable (a check that runs past timeout counts as not
// proven) and, if not, a description of the longest legal prefix.
func checkRegister(h History, timeout time.Duration) (bool, string) {
	res, info := porcupine.CheckOperationsVerbose(registerModel, registerOps(h), timeout)
	if res == porcupine.Ok {
		return true, ""
	}
	if res == porcupine.Unknown {
		return false, fmt.Sprintf("porcupine could not decide within %s", timeout)
	}
	var longest []string
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = longest[:0]
				for _, op := range lin {
					longest = append(longest, registerModel.DescribeOperation(op.Input, op.Output))
				}
			}
		}
	}
	if n := len(longest); n > 4 {
		longest = longest[n-4:]
	}
	return false, "the generation history is not linearizable; the longest legal prefix ends with: " + strings.Join(longest, "; ")
}
