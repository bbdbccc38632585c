package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/google/go-cmp/cmp"
)

func TestExpandFollowsTheKubeletsRules(t *testing.T) {
	vars := map[string]string{"POD": "w-0", "NS": "train", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for _, tc := range []struct{ name, in, want string }{
		{"a known variable is replaced", "$(POD)", "w-0"},
		{"several in one string", "$(NS)/$(POD):$(EMPTY)x", "train/w-0:x"},
		{"an unknown variable stays as written", "$(NOPE)-$(POD)", "$(NOPE)-w-0"},
		{"$$ escapes a reference", "$$(POD)", "$(POD)"},
		{"a lone $ stays", "cost $5 $", "cost $5 $"},
		{"an unclosed reference stays", "$(POD", "$(POD"},
		{"no references", "plain", "plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := expand(tc.in, lookup); got != tc.want {
				t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCapabilitiesAreTheRuntimeDefaultsAdjusted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sc      *corev1.SecurityContext
		want    string
		wantAll bool
	}{
		{name: "no securityContext: the default set", want: setprivCaps(defaultCaps, false)},
		{name: "drop ALL then add NET_ADMIN", sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
			Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}}}, want: "-all,+net_admin"},
		{name: "drop ALL: none", sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
			Drop: []corev1.Capability{"ALL"}}}, want: "-all"},
		{name: "CAP_ prefix and case are ignored", sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
			Drop: []corev1.Capability{"all"}, Add: []corev1.Capability{"CAP_sys_ptrace", "KILL"}}}, want: "-all,+kill,+sys_ptrace"},
		{name: "privileged: all", sc: &corev1.SecurityContext{Privileged: ptr.To(true)}, want: "+all", wantAll: true},
		{name: "add ALL: all", sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
			Add: []corev1.Capability{"ALL"}}}, want: "+all", wantAll: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, all := capabilities(tc.sc)
			if all != tc.wantAll {
				t.Errorf("all = %v, want %v", all, tc.wantAll)
			}
			if diff := cmp.Diff(tc.want, setprivCaps(set, all)); diff != "" {
				t.Errorf("setpriv caps (-want +got):\n%s", diff)
			}
		})
	}
}
