package charttest

import (
	"fmt"
	"strings"
)

// GuideFile is the Kubernetes user guide, whose commands the tests check
// (TestEveryCommandInTheKubernetesGuideIsSupported) and carry out on the
// test control plane (internal/e2e).
const GuideFile = "docs/kubernetes.md"

// Command is one shell command of a ```sh block, its continuation lines
// joined and its comment cut; Line is its first line's number.
type Command struct {
	Text string
	Line int
}

// ShellCommands returns the commands of doc's ```sh blocks in order.
func ShellCommands(doc string) []Command {
	var out []Command
	in := false
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(l, "```sh"):
			in = true
			continue
		case strings.HasPrefix(l, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		l = cutComment(l)
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, Command{Text: t, Line: start})
		}
		cur.Reset()
	}
	return out
}

// cutComment cuts a # comment that starts a word outside quotes.
func cutComment(l string) string {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' '):
			return l[:i]
		}
	}
	return l
}

// ShellWords splits a command into words as sh does for the quoting the
// guide uses (single and double quotes, a backslash outside them); it
// stops at a pipe.
func ShellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for i := 0; i < len(s); i++ {
		r := rune(s[i])
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '$' && i+1 < len(s) && s[i+1] == '(':
			// A command substitution stays one word, its pipes and
			// quotes as written: Substitution takes it apart.
			end := closingParen(s, i+1)
			if end < 0 {
				return nil, fmt.Errorf("unclosed $( in %q", s)
			}
			cur.WriteString(s[i : end+1])
			inWord, i = true, end
		case r == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case r == '|':
			if inWord {
				words = append(words, cur.String())
			}
			return words, nil
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// closingParen returns the index of the parenthesis that closes the one
// at open, outside quotes, or -1.
func closingParen(s string, open int) int {
	depth := 0
	var quote byte
	for i := open; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// Substitution splits word at its command substitution: the text before
// it, the command inside $( ), and whether there is one.
func Substitution(word string) (prefix, command string, ok bool) {
	i := strings.Index(word, "$(")
	if i < 0 || !strings.HasSuffix(word, ")") {
		return word, "", false
	}
	return word[:i], word[i+2 : len(word)-1], true
}
