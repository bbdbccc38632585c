package record

import (
	"strings"
	"testing"
)

func TestValidateNameRefusesWhatWouldBreakThePrefix(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"llama-7b", ""},
		{"team.a_1", ""},
		{"", "job is empty"},
		{"a/b", `job "a/b" contains '/' or whitespace`},
		{"a b", "contains '/' or whitespace"},
		{"a\tb", "contains '/' or whitespace"},
		{"a\n", "contains '/' or whitespace"},
	} {
		err := ValidateName("job", tc.name)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateName(%q) = %v, want %q", tc.name, err, tc.want)
		}
	}
}
