package api

import "time"

// EventType names what an Event announces.
type EventType string

const (
	// EventGeneration: a generation was committed (Event.Generation is
	// this member's view of it). A stream starts with the current one.
	EventGeneration EventType = "generation"
	// EventDrain: this member is leaving (Event.Reason, Event.Deadline);
	// the trainer should commit its state.
	EventDrain EventType = "drain"
	// EventMemberDead: another member was declared dead (Event.Member);
	// a generation without it follows.
	EventMemberDead EventType = "member_dead"
	// EventJobStopped: trainer crashes stopped the job, for good
	// (record.Generation.Stop): Event.Reason says why, naming the members,
	// their exit and its cause, and Event.ExitCode is the crashed
	// trainer's code, which `ringside exec` exits with. It follows the
	// generation that stopped the job, on every stream opened since too.
	EventJobStopped EventType = "job_stopped"
)

// Event is one line of the trainer's event stream.
type Event struct {
	Type EventType `json:"type"`
	Time time.Time `json:"time"`
	// Generation is set for EventGeneration.
	Generation *Rendezvous `json:"generation,omitempty"`
	// Member names the dead member of an EventMemberDead.
	Member string `json:"member,omitempty"`
	// Reason says why a drain started (SIGTERM, a node taint, a leave
	// request) and Deadline when it will leave regardless; or why the job
	// stopped.
	Reason   string     `json:"reason,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
	// ExitCode is set for EventJobStopped.
	ExitCode *int `json:"exit_code,omitempty"`
}

// The modes a trainer's event stream names (GET /v1/events?mode=M); a
// stream that names none is live.
const (
	// ModeLive trainers follow the generations in their own processes.
	ModeLive = "live"
	// ModeRestart trainers are restarted on every generation by their
	// launcher (`ringside exec`): the job batches joins for longer, since
	// each formation restarts every process.
	ModeRestart = "restart"
)
