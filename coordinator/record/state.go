package record

// State is a member's state: the one vocabulary of the key space, the
// trainer API and the status view. Each of them uses part of it:
//
//	state     registration   rendezvous answer   status view
//	          (members/<id>)  (GET /v1/rendezvous) (ringside status)
//	active    yes            yes                 yes
//	draining  yes            -                   yes
//	pending   yes            -                   - (shown as waiting)
//	standby   -              yes                 -
//	paused    -              yes                 -
//	excluded  -              yes                 -
//	waiting   -              -                   yes
//	gone      -              -                   yes
//	unknown   -              -                   yes
//
// The strings are stored in etcd and sent to trainers (the Python client
// compares them): they never change.
type State string

// Registration states: what a member publishes about itself.
const (
	// StateActive members are eligible for the next generation. In a
	// rendezvous answer: this member trains in the generation. In the
	// status view: registered and in the generation.
	StateActive State = "active"
	// StateDraining members are leaving (preemption) and are excluded from
	// the next generation, which the leader commits at once.
	StateDraining State = "draining"
	// StatePending members are registered but wait for their trainer: to
	// start, or to come back after it went away (its event stream closed,
	// its heartbeats stopped, `ringside exec` exited) while the sidecar
	// lives on. No generation places them until they turn active again, so
	// a trainer that starts slowly or crashed does not hold up the others'
	// next group; a member in the ring that turns pending leaves it at once.
	StatePending State = "pending"
)

// Rendezvous states: a member's place in a generation, as the trainer API
// reports it (besides StateActive).
const (
	// StateStandby members are eligible but do not fit the policy; they
	// wait for room and are first in line.
	StateStandby State = "standby"
	// StatePaused members are placed, but the generation is below the
	// policy's min: trainers wait.
	StatePaused State = "paused"
	// StateExcluded members are not part of the generation (draining, or
	// not yet seen by the leader).
	StateExcluded State = "excluded"
)

// Status view states: how a member takes part in the job, as `ringside
// status` shows it (besides StateActive and StateDraining).
const (
	// StateWaiting members are registered but in no generation yet: the
	// job has none, or the leader is still batching their joins.
	StateWaiting State = "waiting"
	// StateGone members are in the committed generation but no longer
	// registered: they crashed or left, and the next generation drops them.
	StateGone State = "gone"
	// StateUnknown members are in the generation, but their members/<id>
	// value is malformed.
	StateUnknown State = "unknown"
)

// Registered reports whether s is a state a member may register with.
func (s State) Registered() bool {
	switch s {
	case StateActive, StateDraining, StatePending:
		return true
	}
	return false
}
