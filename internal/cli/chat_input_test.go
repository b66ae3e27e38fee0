//go:build !cortex_light

package cli

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// typeKeys feeds raw terminal input to an editor, as readLine does, and
// returns the line it ended with (or the state so far).
func typeKeys(le *lineEditor, e *edit, input string) (string, error, bool) {
	pending := []byte(input)
	for len(pending) > 0 {
		k, n := decodeKey(pending)
		if n == 0 {
			break
		}
		pending = pending[n:]
		if line, err, end := le.key(e, k); end {
			return line, err, true
		}
	}
	return string(e.buf), nil, false
}

func TestLineEditorKeys(t *testing.T) {
	for _, tc := range []struct {
		name, ghost, input, want string
		err                      error
	}{
		{"plain", "", "hello\r", "hello", nil},
		{"utf-8 and wide", "", "héllo 日本\r", "héllo 日本", nil},
		{"backspace", "", "hell\x7f\x7fllo\r", "hello", nil},
		{"cursor keys", "", "hllo\x1b[D\x1b[D\x1bOD" + "e\x1b[F!\r", "hello!", nil},
		{"home and delete", "", "xhello\x01\x1b[3~\r", "hello", nil},
		{"ctrl-w ctrl-u ctrl-k", "", "one two\x17three\x01\x0b\r", "", nil},
		{"word delete", "", "one two\x17three\r", "one three", nil},
		{"tab takes the ghost", "run the tests", "\t\r", "run the tests", nil},
		{"right takes the ghost", "run the tests", "\x1b[C now\r", "run the tests now", nil},
		{"typing replaces the ghost", "run the tests", "x\x7f\t\r", "", nil},
		{"enter alone never sends the ghost", "run the tests", "\r", "", nil},
		{"ctrl-c clears a line", "", "abc\x03def\r", "def", nil},
		{"ctrl-c on an empty line", "", "\x03", "", errPromptInterrupt},
		{"ctrl-d on an empty line", "", "\x04", "", io.EOF},
		{"unknown sequences are dropped", "", "a\x1b[15~b\x1b[1;5Cc\r", "abc", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			le := &lineEditor{in: -1, out: &out}
			e := &edit{prompt: "› ", ghost: tc.ghost}
			line, err, end := typeKeys(le, e, tc.input)
			if !end || line != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("line %q err %v end %v; drawn %q", line, err, end, out.String())
			}
		})
	}
}

func TestLineEditorHistoryAndGhostDrawing(t *testing.T) {
	var out bytes.Buffer
	le := &lineEditor{in: -1, out: &out}
	for _, l := range []string{"first", "second"} {
		typeKeys(le, &edit{prompt: "› "}, l+"\r")
	}
	e := &edit{prompt: "› ", hist: len(le.history)}
	if line, _, _ := typeKeys(le, e, "draft\x1b[A\x1b[A\x1b[A"); line != "first" {
		t.Fatalf("up twice: %q", line)
	}
	if line, _, _ := typeKeys(le, e, "\x1b[B\x1b[B"); line != "draft" {
		t.Fatalf("down back to the draft: %q", line)
	}
	// The ghost is drawn dimmed after the prompt, the cursor kept before it.
	out.Reset()
	le.draw(&edit{prompt: "› ", ghost: "go on"})
	if got := out.String(); !strings.Contains(got, "› \x1b[2mgo on\x1b[22m\x1b[K\r\x1b[2C") {
		t.Fatalf("drawn %q", got)
	}
	// A line longer than the terminal scrolls: the cursor's part is shown.
	out.Reset()
	long := strings.Repeat("a", 200) + "END"
	le.draw(&edit{prompt: "› ", buf: []rune(long), pos: len(long)})
	if got := out.String(); !strings.Contains(got, "END") || strings.Count(got, "a") > 80 {
		t.Fatalf("drawn %q", got)
	}
}

func TestScreenRows(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{"hello", 1},
		{"hello\n", 2},
		{strings.Repeat("x", 80), 1},
		{strings.Repeat("x", 81), 2},
		{"a\n\nb", 3},
		{strings.Repeat("日", 41), 2}, // wide: 82 columns
		{"\tx", 1},
	} {
		if got := screenRows(tc.text, 80); got != tc.want {
			t.Errorf("%q: %d rows, want %d", tc.text, got, tc.want)
		}
	}
}

func TestChatViewText(t *testing.T) {
	if got := cleanText("ok\x1b]0;pwned\x07 \x1b[2Jdone\n\tend"); got != "ok]0;pwned [2Jdone\n\tend" {
		t.Fatalf("cleanText: %q", got)
	}
	for in, want := range map[string]string{
		`{"command":"go test ./...","timeout":60}`:       "go test ./...",
		`{"path":"a.go","old_string":"x"}`:               "a.go",
		`{"action":"restore","name":"s1"}`:               "restore s1",
		`{"weird":true}`:                                 `{"weird":true}`,
		`{"command":"` + strings.Repeat("y", 200) + `"}`: strings.Repeat("y", 79) + "…",
	} {
		if got := callSummary([]byte(in)); got != want {
			t.Errorf("callSummary(%s) = %q, want %q", in, got, want)
		}
	}
	if got := resultSummary("line one\nline two\nline three\n"); got != "line one (+2 lines)" {
		t.Fatalf("resultSummary: %q", got)
	}
}
