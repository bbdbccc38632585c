package record

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on every value a reader takes from the key space (or from a
// peer): whoever can write under the prefix must not be able to make a
// reader allocate without limit, overflow an int or dial an address that
// is none. A value past any of them is malformed.
const (
	// MaxSlots bounds a member's slots (ranks): 65,536 processes in one
	// pod is far past any node, yet the world size of MaxMembers such
	// members still fits an int64 many times over.
	MaxSlots = 1 << 16
	// MaxMembers bounds the members (and the standby and left lists) of
	// one generation: ten times the largest job ringside is measured at.
	MaxMembers = 1 << 17
	// MaxIDLen bounds a member id: a Kubernetes pod name is at most 253
	// bytes.
	MaxIDLen = 253
	// MaxHostLen bounds a host name (RFC 1035: 253 bytes).
	MaxHostLen = 253
	// MaxTopologyLevels and MaxLabelLen bound a topology path and each of
	// its levels (a Kubernetes label value is at most 63 bytes; node names
	// and custom labels run longer).
	MaxTopologyLevels = 16
	MaxLabelLen       = 253
	// MaxTextLen bounds free text: a generation's reason, a member's
	// instance.
	MaxTextLen = 4096
	// MaxGeneration bounds generation numbers and revisions, so that the
	// next number never overflows.
	MaxGeneration = math.MaxInt64 / 2
)

// ValidateID reports what is wrong with a member id: empty, too long, or
// holding '/', whitespace or a control character (ids are key segments
// and log fields).
func ValidateID(id string) error {
	switch {
	case id == "":
		return errors.New("id is empty")
	case len(id) > MaxIDLen:
		return fmt.Errorf("id is %d bytes, more than %d", len(id), MaxIDLen)
	case !utf8.ValidString(id):
		return errors.New("id is not UTF-8")
	}
	for _, r := range id {
		if r == '/' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("id %q contains '/', whitespace or a control character", id)
		}
	}
	return nil
}

// ValidateHost reports whether host is an IP address or a DNS name (RFC
// 1123 labels of letters, digits and '-', '_' tolerated), as an address
// a member publishes must be.
func ValidateHost(host string) error {
	if host == "" {
		return errors.New("empty host")
	}
	if len(host) > MaxHostLen {
		return fmt.Errorf("host is %d bytes, more than %d", len(host), MaxHostLen)
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
			}
		}
	}
	return nil
}

// ValidateHostPort reports whether addr is host:port with a valid host
// and a port in 1-65535.
func ValidateHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if err := ValidateHost(host); err != nil {
		return err
	}
	return ValidatePort(port)
}

// ValidatePort reports whether port is a decimal port in 1-65535.
func ValidatePort(port string) error {
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q is not in 1-65535", port)
	}
	return nil
}

// validText bounds free text and keeps control characters out of it.
func validText(what, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, more than %d", what, len(s), limit)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not UTF-8", what)
	}
	return nil
}
