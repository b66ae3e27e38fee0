package memory

import (
	"slices"
	"strings"
	"unicode"
)

// maxQueryTerms bounds the work one search can ask for; later words are
// ignored.
const maxQueryTerms = 32

// buildQueries turns a model's free text into two FTS5 MATCH expressions
// that can never be a syntax error: all (every term must match) and any
// (at least one must). Both are "" when the text holds no words.
//
// Each whitespace-separated word becomes one FTS5 string: its letters and
// digits, split where unicode61 would split them ("e-mail" → "e mail", a
// phrase), in double quotes. Nothing the model wrote survives as syntax —
// AND, NEAR(, column:, ^, quotes and parentheses are separators or plain
// words. A word that ends in * keeps it, outside the quotes, as a prefix
// search on its last token.
func buildQueries(text string) (all, any string) {
	var terms []string
	for _, word := range strings.Fields(text) {
		if len(terms) == maxQueryTerms {
			break
		}
		tokens := strings.FieldsFunc(word, isSeparator)
		if len(tokens) == 0 {
			continue
		}
		// The tokens hold no quotes (a quote is a separator); doubling
		// them anyway keeps this safe if isSeparator ever changes.
		term := `"` + strings.ReplaceAll(strings.Join(tokens, " "), `"`, `""`) + `"`
		if strings.HasSuffix(word, "*") {
			term += "*"
		}
		if !slices.Contains(terms, term) {
			terms = append(terms, term)
		}
	}
	return strings.Join(terms, " AND "), strings.Join(terms, " OR ")
}

// isSeparator approximates the unicode61 tokenizer: letters, numbers,
// combining marks and private-use characters make tokens; everything else
// separates them.
func isSeparator(r rune) bool {
	return !unicode.IsLetter(r) && !unicode.IsNumber(r) && !unicode.IsMark(r) && !unicode.Is(unicode.Co, r)
}
