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
		{"Team.A_1-x", ""},
		{strings.Repeat("a", 63), ""},
		{strings.Repeat("a", 64), "more than 63"},
		{"a:b", `contains ':'`},
		{"llamaé", "contains"},
		{"-a", "must begin and end with a letter or digit"},
		{"a.", "must begin and end with a letter or digit"},
	} {
		err := ValidateName("job", tc.name)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateName(%q) = %v, want %q", tc.name, err, tc.want)
		}
	}
}
