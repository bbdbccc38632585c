package record

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
)

// StoreTokenBytes is how many random bytes a store token holds; it is
// their hex encoding.
const StoreTokenBytes = 16

// NewStoreToken returns a new random store token (Generation.StoreToken).
func NewStoreToken() (string, error) {
	b := make([]byte, StoreTokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("store token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// LogValue is what slog writes for a generation: its shape, never its
// store token.
func (g *Generation) LogValue() slog.Value {
	if g == nil {
		return slog.StringValue("<none>")
	}
	return slog.GroupValue(slog.Int64("number", g.Number), slog.Int("world_size", g.WorldSize),
		slog.Int("members", len(g.Members)), slog.Bool("paused", g.Paused), slog.String("leader", g.Leader),
		slog.String("reason", g.Reason), slog.Int64("restarts", g.Restarts), slog.Bool("stopped", g.Stop != nil))
}

// String is the generation for people (and %v), without its store token.
func (g *Generation) String() string {
	if g == nil {
		return "<no generation>"
	}
	return fmt.Sprintf("generation %d (world size %d, %d members, leader %s)", g.Number, g.WorldSize, len(g.Members), g.Leader)
}

// Generation is one committed configuration of the all-reduce group,
// stored under the job's generation key. A Generation handed out by a
// decoder is shared: treat it as read-only.
type Generation struct {
	// Number increases by one with every commit.
	Number int64 `json:"number"`
	// Members in ring order; ranks are contiguous from 0.
	Members []RankedMember `json:"members"`
	// Standby members are eligible but do not fit the policy; they join
	// first when room opens.
	Standby []string `json:"standby,omitempty"`
	// WorldSize is the number of ranks: the sum of the members' slots.
	WorldSize int `json:"world_size"`
	// MasterAddr and MasterPort are where rank 0 serves the group's store.
	MasterAddr string `json:"master_addr"`
	MasterPort int    `json:"master_port"`
	// Paused generations are below the policy's min: trainers wait.
	Paused bool `json:"paused,omitempty"`
	// Left are the members of the previous generation whose registration
	// went: they died, were evicted or left without draining. Their peers
	// drop any connection to them at once.
	Left []string `json:"left,omitempty"`
	// Reason says what changed, for people.
	Reason string `json:"reason"`
	// Leader is the member that committed the generation.
	Leader string `json:"leader"`
	// MemberRevision is the etcd revision of members/ it was built from.
	MemberRevision int64 `json:"member_revision"`
	// StoreToken is the generation's secret for rank 0's store: random,
	// new with every commit (NewStoreToken), handed by the trainer API to
	// the generation's placed members only (Rendezvous.StoreToken), so the
	// store can refuse every client that is not a rank of this generation.
	// It is a secret: it never goes into logs, metrics or status output
	// (LogValue leaves it out).
	StoreToken string `json:"store_token,omitempty"`
	// Restarts counts the job's restarts after trainer crashes so far, as
	// torchrun counts its max_restarts: the generation a leader commits
	// for a crash it counts carries one more than the one before, every
	// other generation as many. Deaths, drains and joins do not count.
	Restarts int64 `json:"restarts,omitempty"`
	// FailedStarts counts the generations in a row, up to the one before
	// this, that a trainer crash before its first step ended.
	FailedStarts int64 `json:"failed_starts,omitempty"`
	// Stop is set on the job's last generation: trainer crashes stopped
	// the job. Its members are the previous generation's, and none of
	// them trains in it; no generation follows while any of them is
	// registered, so a job stays stopped until its pods are replaced.
	Stop *Stop `json:"stop,omitempty"`

	index map[string]int
}

// Stop says why trainer crashes stopped a job.
type Stop struct {
	// Message names the members, their exit and the cause, for people:
	// "every worker exits 1 before its first step, 3 generations in a
	// row: EOFError: Ran out of input, at train.py:31: ...".
	Message string `json:"message"`
	// ExitCode is the crashed trainer's exit code: every launcher exits
	// with it.
	ExitCode int `json:"exit_code"`
	// Crashed are the members whose trainers' crashes the message is about.
	Crashed []string `json:"crashed,omitempty"`
}

// RankedMember is a member's place in a generation.
type RankedMember struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Rank is the member's first rank; it holds Rank..Rank+Slots-1.
	Rank  int `json:"rank"`
	Slots int `json:"slots"`
	// Incarnation is the member's restart count when the generation was
	// built.
	Incarnation int64 `json:"incarnation,omitempty"`
	// Instance is the member's process (MemberInfo.Instance).
	Instance string `json:"instance,omitempty"`
}

// Member returns the member with id and whether it is in the generation.
// It builds the lookup on first use unless BuildIndex did.
func (g *Generation) Member(id string) (RankedMember, bool) {
	i, ok := g.position(id)
	if !ok {
		return RankedMember{}, false
	}
	return g.Members[i], true
}

// position returns id's index in Members.
func (g *Generation) position(id string) (int, bool) {
	if g.index == nil {
		g.BuildIndex()
	}
	i, ok := g.index[id]
	return i, ok
}

// Successors returns the ids of the up to k members after id in the ring,
// nearest first (none that is id itself); nil if id is not a member.
func (g *Generation) Successors(id string, k int) []string { return g.around(id, k, 1) }

// Predecessors returns the ids of the up to k members before id in the
// ring, nearest first (none that is id itself); nil if id is not a member.
func (g *Generation) Predecessors(id string, k int) []string { return g.around(id, k, -1) }

func (g *Generation) around(id string, k, step int) []string {
	i, ok := g.position(id)
	if !ok {
		return nil
	}
	n := len(g.Members)
	var out []string
	for d := 1; d <= k && d < n; d++ {
		out = append(out, g.Members[((i+step*d)%n+n)%n].ID)
	}
	return out
}

// IDs returns the member ids in ring order.
func (g *Generation) IDs() []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.ID
	}
	return ids
}

// BuildIndex prepares Member's lookup. Call it once Members is final and
// before the generation is shared between goroutines (DecodeGeneration
// does): Member then only reads.
func (g *Generation) BuildIndex() {
	g.index = make(map[string]int, len(g.Members))
	for i, m := range g.Members {
		g.index[m.ID] = i
	}
}

// DecodeGeneration decodes and checks a stored generation; the result has
// its index built, so it is safe to share between goroutines.
func DecodeGeneration(value []byte) (*Generation, error) {
	var g Generation
	if err := json.Unmarshal(value, &g); err != nil {
		return nil, fmt.Errorf("malformed generation: %w", err)
	}
	if err := g.Validate(); err != nil {
		if g.Number < 1 {
			return nil, fmt.Errorf("malformed generation: %w", err)
		}
		return nil, fmt.Errorf("malformed generation %d: %w", g.Number, err)
	}
	g.BuildIndex()
	return &g, nil
}

// Validate reports the first rule of a generation that g breaks: a
// positive number, distinct members with slots, ranks contiguous from 0 in
// ring order, a world size that is their sum, addresses that parse, and
// every value within its bound (MaxMembers, MaxSlots, ...), so that no sum
// overflows.
func (g *Generation) Validate() error {
	if g.Number < 1 {
		return fmt.Errorf("number %d is not positive", g.Number)
	}
	if g.Number > MaxGeneration {
		return fmt.Errorf("number %d is more than %d", g.Number, int64(MaxGeneration))
	}
	if len(g.Members) > MaxMembers || len(g.Standby) > MaxMembers || len(g.Left) > MaxMembers {
		return fmt.Errorf("more than %d members, standby or left members", MaxMembers)
	}
	rank := 0
	seen := make(map[string]bool, len(g.Members))
	for _, m := range g.Members {
		if err := ValidateID(m.ID); err != nil {
			if m.ID == "" {
				return errors.New("a member has no id")
			}
			return fmt.Errorf("a member's %w", err)
		}
		switch {
		case seen[m.ID]:
			return fmt.Errorf("member %q appears twice", m.ID)
		case m.Slots < 1 || m.Slots > MaxSlots:
			return fmt.Errorf("member %q has %d slots", m.ID, m.Slots)
		case m.Rank != rank:
			return fmt.Errorf("member %q has rank %d, want %d", m.ID, m.Rank, rank)
		case m.Incarnation < 0 || m.Incarnation > MaxGeneration:
			return fmt.Errorf("member %q has incarnation %d", m.ID, m.Incarnation)
		}
		if m.Addr != "" {
			if err := ValidateHost(m.Addr); err != nil {
				return fmt.Errorf("member %q addr: %w", m.ID, err)
			}
		}
		if err := validText("instance", m.Instance, MaxIDLen); err != nil {
			return fmt.Errorf("member %q: %w", m.ID, err)
		}
		seen[m.ID] = true
		rank += m.Slots
	}
	if rank != g.WorldSize {
		return fmt.Errorf("world size %d, but the members hold %d ranks", g.WorldSize, rank)
	}
	for _, id := range append(slices.Clip(g.Standby), g.Left...) {
		if err := ValidateID(id); err != nil {
			return fmt.Errorf("a standby or left member's %w", err)
		}
	}
	if len(g.Members) > 0 && g.MasterAddr != "" {
		if err := ValidateHost(g.MasterAddr); err != nil {
			return fmt.Errorf("master_addr: %w", err)
		}
	}
	if g.MasterPort < 0 || g.MasterPort > 65535 || (len(g.Members) > 0 && g.MasterAddr != "" && g.MasterPort == 0) {
		return fmt.Errorf("master port %d is not in 1-65535", g.MasterPort)
	}
	if g.MemberRevision < 0 || g.MemberRevision > MaxGeneration {
		return fmt.Errorf("member revision %d is out of range", g.MemberRevision)
	}
	if err := validText("reason", g.Reason, MaxTextLen); err != nil {
		return err
	}
	if g.Leader != "" {
		if err := ValidateID(g.Leader); err != nil {
			return fmt.Errorf("leader's %w", err)
		}
	}
	if len(g.StoreToken) > 2*64 {
		return fmt.Errorf("store token is %d characters, more than %d", len(g.StoreToken), 2*64)
	}
	if _, err := hex.DecodeString(g.StoreToken); err != nil {
		return errors.New("store token is not hex")
	}
	if g.Restarts < 0 || g.Restarts > MaxGeneration || g.FailedStarts < 0 || g.FailedStarts > MaxGeneration {
		return fmt.Errorf("restarts %d or failed starts %d is out of range", g.Restarts, g.FailedStarts)
	}
	if s := g.Stop; s != nil {
		if err := validText("stop message", s.Message, MaxTextLen); err != nil {
			return err
		}
		if s.ExitCode < 0 || s.ExitCode > 255 {
			return fmt.Errorf("stop exit code %d is not in 0-255", s.ExitCode)
		}
		if len(s.Crashed) > MaxMembers {
			return fmt.Errorf("more than %d crashed members", MaxMembers)
		}
		for _, id := range s.Crashed {
			if err := ValidateID(id); err != nil {
				return fmt.Errorf("a crashed member's %w", err)
			}
		}
	}
	return nil
}
