package record

import (
	"fmt"
	"strings"
)

// The job's keys, relative to its Prefix.
const (
	// MembersDir holds members/<id>, one MemberInfo per member.
	MembersDir = "members/"
	// ElectionDir holds the leader campaign; the first key is the leader's.
	ElectionDir = "election/"
	// GenerationKey holds the committed Generation.
	GenerationKey = "generation"
	// StatusDir holds status/<id>, one Status per member.
	StatusDir = "status/"
	// SuspectsDir holds suspects/<target>/<voter>: one Vote per member
	// whose own check found target unresponsive, on the voter's lease.
	SuspectsDir = "suspects/"
	// EvictedDir holds evicted/<id> from the eviction (or the Leave) of a
	// member until the leader commits the generation without it: a member
	// key deleted without one lost its lease to time (see
	// coordinator.Config.ExpiryGrace).
	EvictedDir = "evicted/"
	// CrashesDir holds crashes/<id>: a member's newest trainer exit in
	// restart mode (Crash): a failure on the member's lease, a finish
	// without one.
	CrashesDir = "crashes/"
	// StragglersDir holds stragglers/<id>: the leader's finding that
	// member id computes slower than the job (Straggler).
	StragglersDir = "stragglers/"
	// DrainsKey holds the durations of the members' drains (Drains),
	// without a lease.
	DrainsKey = "drains"
)

// Prefix is the key prefix of job in namespace, ending in "/".
func Prefix(namespace, job string) string {
	return "/ringside/" + namespace + "/" + job + "/"
}

// MaxNameLen bounds a namespace or job name: a Kubernetes label value
// (the webhook takes the job from the pod's ringside.dev/job label).
const MaxNameLen = 63

// ValidateName reports what is wrong with a namespace or job name (what
// says which, for the message). Each is one segment of Prefix, a label
// value and part of the job's etcd user, so it follows the rules of a
// Kubernetes label value: at most 63 letters, digits, '-', '_' and '.',
// beginning and ending with a letter or digit. That rules out '/', which
// would nest one job's keys in another's, and whitespace.
func ValidateName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%s %q is %d characters, more than %d", what, name, len(name), MaxNameLen)
	}
	for i, r := range name {
		alnum := 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
		switch {
		case r == '/' || r <= ' ':
			return fmt.Errorf("%s %q contains '/' or whitespace: use letters, digits, '-', '_' and '.'", what, name)
		case !alnum && r != '-' && r != '_' && r != '.':
			return fmt.Errorf("%s %q contains %q: use letters, digits, '-', '_' and '.'", what, name, r)
		case !alnum && (i == 0 || i == len(name)-1):
			return fmt.Errorf("%s %q must begin and end with a letter or digit", what, name)
		}
	}
	return nil
}

// idOf returns the last segment of a members/<id> or status/<id> key.
func idOf(key string) string {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[i+1:]
		}
	}
	return key
}

// KindOf names what a key (relative to the job's Prefix, or absolute)
// holds, for the count of malformed values: member, generation, vote,
// status, eviction, crash, straggler, or other.
func KindOf(key string) string {
	if i := indexJobKey(key); i >= 0 {
		key = key[i:]
	}
	switch {
	case strings.HasPrefix(key, MembersDir):
		return "member"
	case key == GenerationKey:
		return "generation"
	case strings.HasPrefix(key, SuspectsDir):
		return "vote"
	case strings.HasPrefix(key, StatusDir):
		return "status"
	case strings.HasPrefix(key, EvictedDir):
		return "eviction"
	case strings.HasPrefix(key, CrashesDir):
		return "crash"
	case strings.HasPrefix(key, StragglersDir):
		return "straggler"
	}
	return "other"
}

// indexJobKey returns where the job-relative part of an absolute key
// (/ringside/<namespace>/<job>/...) starts, or -1 for a relative key.
func indexJobKey(key string) int {
	const root = "/ringside/"
	if !strings.HasPrefix(key, root) {
		return -1
	}
	slashes := 0
	for i := len(root); i < len(key); i++ {
		if key[i] == '/' {
			slashes++
			if slashes == 2 {
				return i + 1
			}
		}
	}
	return -1
}
