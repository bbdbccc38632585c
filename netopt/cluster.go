package netopt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ringside/ringside/coordinator/record"
)

// ClusterMember is one member of a cluster file, the input of
// `ringside netopt plan`:
//
//	[{"id": "w0", "topology": ["zone-a", "block-1", "rack-3", "host-7"], "slots": 8}, ...]
type ClusterMember struct {
	ID string `json:"id"`
	// Topology is broad to narrow; every member has the same depth.
	Topology []string `json:"topology"`
	Slots    int      `json:"slots"`
}

// maxClusterErrors caps the problems one error lists: a file that is wrong
// everywhere is wrong for one reason.
const maxClusterErrors = 10

// ReadCluster decodes and checks a cluster file. The error names every
// problem (up to ten) with the member's position and id.
func ReadCluster(r io.Reader) ([]ClusterMember, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read cluster: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var members []ClusterMember
	if err := dec.Decode(&members); err != nil {
		return nil, fmt.Errorf("cluster file is not a JSON array of members: %s", describeJSONError(data, err))
	}
	if dec.More() {
		return nil, errors.New("cluster file has data after the JSON array")
	}
	if err := ValidateCluster(members); err != nil {
		return nil, err
	}
	return members, nil
}

// WriteCluster writes a cluster file ReadCluster reads back, one member
// per line, so the file diffs and greps well.
func WriteCluster(w io.Writer, cluster []ClusterMember) error {
	var b strings.Builder
	b.WriteString("[\n")
	for i, m := range cluster {
		line, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode member: %w", err)
		}
		b.Write(line)
		if i < len(cluster)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write cluster: %w", err)
	}
	return nil
}

// ValidateCluster reports what is wrong with a list of members.
func ValidateCluster(members []ClusterMember) error {
	if len(members) == 0 {
		return errors.New("cluster has no members")
	}
	var errs []error
	fail := func(i int, format string, args ...any) {
		if len(errs) < maxClusterErrors {
			errs = append(errs, fmt.Errorf("member %d (id %q): %s", i, members[i].ID, fmt.Sprintf(format, args...)))
		}
	}
	seen := make(map[string]int, len(members))
	depth := len(members[0].Topology)
	for i, m := range members {
		switch {
		case m.ID == "":
			fail(i, "id is empty")
		case strings.ContainsAny(m.ID, "/ \t\n"):
			fail(i, "id contains '/' or whitespace")
		default:
			if j, dup := seen[m.ID]; dup {
				fail(i, "id repeats member %d", j)
			} else {
				seen[m.ID] = i
			}
		}
		if m.Slots < 1 {
			fail(i, "slots must be at least 1, got %d", m.Slots)
		} else if m.Slots > record.MaxSlots {
			fail(i, "slots %d is more than %d", m.Slots, record.MaxSlots)
		}
		if len(m.Topology) != depth {
			fail(i, "topology has %d levels but member 0 has %d; every member needs the same depth", len(m.Topology), depth)
		}
		for l, v := range m.Topology {
			if strings.TrimSpace(v) == "" {
				fail(i, "topology level %d is empty", l)
			}
		}
	}
	if len(errs) == maxClusterErrors {
		errs = append(errs, errors.New("(further problems not listed)"))
	}
	return errors.Join(errs...)
}

// Members converts the cluster to coordinator members, in file order.
func Members(cluster []ClusterMember) []record.MemberInfo {
	out := make([]record.MemberInfo, len(cluster))
	for i, c := range cluster {
		out[i] = record.MemberInfo{ID: c.ID, Topology: c.Topology, Slots: c.Slots, State: record.StateActive}
	}
	return out
}

// describeJSONError adds the line and column to a decoding error.
func describeJSONError(data []byte, err error) string {
	var offset int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	case errors.Is(err, io.EOF):
		return "file is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "file ends in the middle of the JSON"
	}
	if offset < 0 || offset > int64(len(data)) {
		return err.Error()
	}
	line := 1 + bytes.Count(data[:offset], []byte("\n"))
	col := offset - 1 - int64(bytes.LastIndexByte(data[:offset], '\n'))
	return fmt.Sprintf("line %d, column %d: %v", line, col, err)
}
