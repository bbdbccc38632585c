package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Vote is one member's report, stored under suspects/<target>/<voter> on
// the voter's lease, that its own check found the target unresponsive. It
// names the registration it saw (the target's lease), so a vote against a
// pod's previous incarnation can never evict its replacement, and it
// vanishes with its voter.
type Vote struct {
	// Lease is the etcd lease of the target's registration the voter saw.
	Lease int64 `json:"lease"`
	// Gone: the target's gossip port refused the voter's connection, so
	// its process is gone: nothing is left to refute the vote.
	Gone bool `json:"gone,omitempty"`
	// Unreachable: the target's node did not complete a TCP handshake with
	// the voter either: its node or the network to it is down, which no
	// stall of its process explains.
	Unreachable bool `json:"unreachable,omitempty"`
	// Waiting: the voter's trainer was held up when it voted (no step for
	// its stall limit): training waits, most likely on the target. A
	// quorum of silent votes none of which says so holds nobody up, and
	// waits longer for a refutation (coordinator.Config.IdleRefuteWindow).
	Waiting bool `json:"waiting,omitempty"`
}

// VoteKey returns the key, relative to the job's Prefix, of voter's vote
// against target.
func VoteKey(target, voter string) string { return SuspectsDir + target + "/" + voter }

// DecodeVote decodes the value of a suspects/<target>/<voter> key given
// relative to the job's Prefix, and returns target and voter with it.
func DecodeVote(key string, value []byte) (target, voter string, v Vote, err error) {
	rest, ok := strings.CutPrefix(key, SuspectsDir)
	target, voter, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || target == "" || voter == "" || strings.Contains(voter, "/") {
		return "", "", Vote{}, fmt.Errorf("malformed vote key %q: want %s<target>/<voter>", key, SuspectsDir)
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return "", "", Vote{}, fmt.Errorf("malformed vote %s: %w", key, err)
	}
	if v.Lease == 0 {
		return "", "", Vote{}, errors.New("malformed vote " + key + ": no lease")
	}
	return target, voter, v, nil
}
