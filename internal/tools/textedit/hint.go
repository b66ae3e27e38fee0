package textedit

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// minSimilarity is the score below which a "closest text" is not worth
	// showing: it would send the model after the wrong lines.
	minSimilarity = 0.5
	// maxHintLines and maxHintBytes bound the text quoted in a hint.
	maxHintLines = 30
	maxHintBytes = 4000
	// pairBudget bounds the line comparisons MostSimilar makes, so a hint
	// for a long old_string in a large file stays cheap.
	pairBudget = 1 << 20
)

// notFoundHint explains why old does not occur in s: either it matches once
// whitespace is ignored, or some other text is similar, or nothing is.
func notFoundHint(s, old string) string {
	if h := whitespaceHint(s, old); h != "" {
		return h
	}
	lines := splitLines(s)
	want := splitLines(strings.Trim(strings.ReplaceAll(old, "\r\n", "\n"), "\n"))
	start, score := MostSimilar(lines, want)
	if start < 0 || score < minSimilarity {
		return "Nothing in the file is close to it; read the file again to see its current content"
	}
	end := min(start+len(want), len(lines))
	return fmt.Sprintf("The most similar text is %s (%d%% similar):\n%s\nRead the file again if it may have changed, and copy the text exactly into old_string",
		lineRange(start+1, end), int(score*100), quoteLines(lines[start:end]))
}

// whitespaceHint reports where old matches s when whitespace is ignored and
// punctuation folded, or "" when it does not.
func whitespaceHint(s, old string) string {
	needle, _, _ := squeeze(old, true)
	if needle == "" {
		return ""
	}
	hay, start, end := squeeze(s, true)
	i := strings.Index(hay, needle)
	if i < 0 {
		return ""
	}
	a, b := int(start[i]), int(end[i+len(needle)-1])
	ls := strings.LastIndexByte(s[:a], '\n') + 1
	le := len(s)
	if j := strings.IndexByte(s[b:], '\n'); j >= 0 {
		le = b + j
	}
	first := 1 + strings.Count(s[:ls], "\n")
	last := first + strings.Count(s[ls:le], "\n")
	what := "whitespace (indentation, trailing spaces or line breaks) is ignored"
	if x, _, _ := squeeze(s[a:b], false); x != strings.Join(strings.Fields(old), "") {
		what = "whitespace is ignored and typographic quotes or dashes are folded to ASCII"
	}
	where := lineRange(first, last)
	if n := strings.Count(hay, needle); n > 1 {
		where = fmt.Sprintf("%d places; the first is %s", n, where)
	}
	return fmt.Sprintf("It matches %s only if %s, so nothing was changed. The file has exactly:\n%s\nCopy that text exactly, including indentation, into old_string",
		where, what, quoteLines(splitLines(s[ls:le])))
}

// squeeze returns s without whitespace, with punctuation folded when fold is
// set, and for each byte of the result the offsets [start, end) in s of the
// rune it came from. start and end are nil when fold is false.
func squeeze(s string, fold bool) (string, []int32, []int32) {
	var b strings.Builder
	var start, end []int32
	if fold {
		start = make([]int32, 0, len(s))
		end = make([]int32, 0, len(s))
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if fold {
			r = foldRune(r)
		}
		if !unicode.IsSpace(r) {
			if r == utf8.RuneError && n == 1 {
				b.WriteByte(s[i])
			} else {
				b.WriteRune(r)
			}
			for fold && len(start) < b.Len() {
				start = append(start, int32(i))
				end = append(end, int32(i+n))
			}
		}
		i += n
	}
	return b.String(), start, end
}

// MostSimilar finds the run of len(want) consecutive lines in lines that is
// most similar to want, comparing lines with leading and trailing whitespace
// ignored. It returns the 0-based index of the run's first line and a score
// from 0 (nothing alike) to 1 (equal), or -1 and 0 when either is empty.
// Large inputs are compared on want's first lines only, so the cost stays
// bounded.
func MostSimilar(lines, want []string) (int, float64) {
	if len(lines) == 0 || len(want) == 0 {
		return -1, 0
	}
	m := min(len(want), len(lines), max(1, pairBudget/len(lines)))
	wantGrams := make([][]uint16, m)
	for j := range m {
		wantGrams[j] = bigrams(want[j])
	}
	grams := make([][]uint16, len(lines))
	for i := range lines {
		grams[i] = bigrams(lines[i])
	}
	best, bestScore := -1, -1.0
	for i := 0; i+m <= len(lines); i++ {
		sum := 0.0
		for j := range m {
			sum += dice(grams[i+j], wantGrams[j], lines[i+j], want[j])
		}
		if score := sum / float64(m); score > bestScore {
			best, bestScore = i, score
		}
	}
	return best, bestScore
}

// bigrams returns the sorted byte bigrams of s with surrounding whitespace
// trimmed; long lines count by their first 512 bytes.
func bigrams(s string) []uint16 {
	s = strings.TrimSpace(s)
	s = s[:min(len(s), 512)]
	if len(s) < 2 {
		return nil
	}
	g := make([]uint16, len(s)-1)
	for i := range g {
		g[i] = uint16(s[i])<<8 | uint16(s[i+1])
	}
	slices.Sort(g)
	return g
}

// dice is the Sørensen–Dice coefficient of two bigram multisets; strings too
// short to have bigrams are compared directly.
func dice(a, b []uint16, sa, sb string) float64 {
	if len(a) == 0 || len(b) == 0 {
		if strings.TrimSpace(sa) == strings.TrimSpace(sb) {
			return 1
		}
		return 0
	}
	common := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			common++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return 2 * float64(common) / float64(len(a)+len(b))
}

// splitLines splits s into lines without their "\n" or "\r\n"; a final line
// ending adds no empty line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

func lineRange(first, last int) string {
	if first == last {
		return fmt.Sprintf("line %d", first)
	}
	return fmt.Sprintf("lines %d-%d", first, last)
}

// quoteLines renders lines for a hint, bounded in size.
func quoteLines(lines []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i == maxHintLines || (i > 0 && b.Len()+len(l) > maxHintBytes) {
			fmt.Fprintf(&b, "[… %d more lines]\n", len(lines)-i)
			break
		}
		if len(l) > maxHintBytes {
			l = strings.ToValidUTF8(l[:maxHintBytes], "") + "…"
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}
