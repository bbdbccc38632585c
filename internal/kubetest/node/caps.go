package node

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// defaultCaps is the set containerd and Docker give a container whose
// securityContext adds and drops nothing.
var defaultCaps = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// capabilities returns the container's capability set, upper case without
// CAP_: the default set, less what it drops (ALL: everything), plus what it
// adds (ALL: every capability, as privileged does).
func capabilities(sc *corev1.SecurityContext) (set []string, all bool) {
	set = slices.Clone(defaultCaps)
	if sc == nil {
		return set, false
	}
	if sc.Privileged != nil && *sc.Privileged {
		return nil, true
	}
	if sc.Capabilities == nil {
		return set, false
	}
	norm := func(c corev1.Capability) string { return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_") }
	for _, d := range sc.Capabilities.Drop {
		if norm(d) == "ALL" {
			set = nil
			break
		}
		set = slices.DeleteFunc(set, func(c string) bool { return c == norm(d) })
	}
	for _, a := range sc.Capabilities.Add {
		if norm(a) == "ALL" {
			return nil, true
		}
		if !slices.Contains(set, norm(a)) {
			set = append(set, norm(a))
		}
	}
	slices.Sort(set)
	return set, false
}

// setprivCaps is the setpriv argument for a capability set: -all then
// each capability added, lower case.
func setprivCaps(set []string, all bool) string {
	if all {
		return "+all"
	}
	s := "-all"
	for _, c := range set {
		s += ",+" + strings.ToLower(c)
	}
	return s
}
