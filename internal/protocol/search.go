package protocol

import (
	"regexp/syntax"
	"slices"
	"strings"
)

// Search modes.
const (
	SearchModeContent = "content" // matching lines (with context)
	SearchModeFiles   = "files"   // the files that hold a match
	SearchModeCount   = "count"   // matching lines per file
	SearchModeFind    = "find"    // the files whose path matches the globs
)

// Search limits.
const (
	DefaultSearchResults   = 500
	MaxSearchResults       = 10000
	DefaultSearchLineChars = 500
	MaxSearchContext       = 100
	DefaultSearchFileBytes = 10 << 20
)

// SearchArgs searches the files under Path, the way ripgrep would, inside
// the neuron: no grep, find or rg needs to be in the image.
type SearchArgs struct {
	// Path is the root to search, resolved like every file command's path
	// (relative to the workdir); a file is searched alone.
	Path string `json:"path"`
	// Pattern is an RE2 regular expression (Go regexp syntax), matched
	// against each line; required in the content modes, refused by find.
	Pattern string `json:"pattern,omitempty"`
	// Mode is SearchModeContent (the default), SearchModeFiles, SearchModeCount or SearchModeFind.
	Mode string `json:"mode,omitempty"`
	// Glob selects files by globs relative to the root: "**" spans
	// directories, "{a,b}" alternates, a leading "!" excludes, a glob with
	// no "/" matches the base name at any depth. The last glob that matches
	// a path decides; with no include glob every file is a candidate. An
	// excluded directory is not entered.
	Glob []string `json:"glob,omitempty"`
	// Type keeps only files of a type in SearchTypes ("go", "py", ...).
	Type string `json:"type,omitempty"`
	// IgnoreCase matches without regard to case.
	IgnoreCase bool `json:"ignoreCase,omitempty"`
	// Literal takes Pattern as a fixed string.
	Literal bool `json:"literal,omitempty"`
	// Context is the lines of context shown before and after each match
	// (content mode), like grep -C.
	Context int `json:"context,omitempty"`
	// MaxResults caps the matching lines (content), files (files, find) or
	// entries (count): DefaultSearchResults by default, at most MaxSearchResults.
	MaxResults int `json:"maxResults,omitempty"`
	// MaxLineChars cuts lines longer than this many characters
	// (DefaultSearchLineChars by default); a cut line ends in "…".
	MaxLineChars int `json:"maxLineChars,omitempty"`
	// Hidden includes dot files and directories (.git is always skipped).
	Hidden bool `json:"hidden,omitempty"`
	// NoIgnore does not honour .gitignore files.
	NoIgnore bool `json:"noIgnore,omitempty"`
	// MaxFileBytes skips larger files (DefaultSearchFileBytes by default).
	MaxFileBytes int64 `json:"maxFileBytes,omitempty"`
}

// SearchMatch is one line of a content search.
type SearchMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"` // 1-based
	Text string `json:"text"`
	// Context marks a line shown for context, not a match.
	Context bool `json:"context,omitempty"`
}

// SearchCount is how many lines of one file match.
type SearchCount struct {
	Path  string `json:"path"`
	Count int    `json:"count"`
}

// SearchResult answers search. Paths are relative to the searched root (a
// file searched alone is reported by the path it was given). Matches and
// Counts are sorted by path (component by component, so a directory's
// files stay together) and line; Files too, except in find mode, where the
// newest file comes first (ties by path).
type SearchResult struct {
	Matches []SearchMatch `json:"matches,omitempty"`
	Files   []string      `json:"files,omitempty"`
	Counts  []SearchCount `json:"counts,omitempty"`
	// Truncated says results were left out: MaxResults was reached, or the
	// result would not fit in a response frame.
	Truncated bool `json:"truncated,omitempty"`
	// FilesScanned counts the files read (or, in find mode, considered).
	FilesScanned int `json:"filesScanned"`
	// SkippedBinary counts files skipped for a NUL byte in their first 8 KiB.
	SkippedBinary int `json:"skippedBinary,omitempty"`
}

// SearchTypes maps the file type names of SearchArgs.Type to the base-name
// globs of their files (a subset of ripgrep's table, with some aliases).
var SearchTypes = map[string][]string{
	"c":         {"*.c", "*.h"},
	"cpp":       {"*.cc", "*.cpp", "*.cxx", "*.c++", "*.C", "*.h", "*.hh", "*.hpp", "*.hxx", "*.h++", "*.inl"},
	"cs":        {"*.cs", "*.csx"},
	"css":       {"*.css", "*.scss", "*.sass", "*.less"},
	"dart":      {"*.dart"},
	"docker":    {"Dockerfile", "Dockerfile.*", "*.dockerfile", "Containerfile"},
	"elixir":    {"*.ex", "*.exs"},
	"go":        {"*.go"},
	"haskell":   {"*.hs", "*.lhs"},
	"html":      {"*.html", "*.htm", "*.xhtml"},
	"java":      {"*.java"},
	"js":        {"*.js", "*.jsx", "*.mjs", "*.cjs", "*.vue"},
	"json":      {"*.json", "*.jsonl"},
	"kotlin":    {"*.kt", "*.kts"},
	"lua":       {"*.lua"},
	"make":      {"Makefile", "makefile", "GNUmakefile", "*.mk", "*.mak"},
	"md":        {"*.md", "*.markdown", "*.mdx", "*.mkd"},
	"perl":      {"*.pl", "*.pm", "*.t"},
	"php":       {"*.php", "*.phtml"},
	"proto":     {"*.proto"},
	"py":        {"*.py", "*.pyi"},
	"r":         {"*.R", "*.r", "*.Rmd"},
	"rb":        {"*.rb", "*.rake", "*.gemspec", "Gemfile", "Rakefile"},
	"rust":      {"*.rs"},
	"scala":     {"*.scala", "*.sbt"},
	"sh":        {"*.sh", "*.bash", "*.zsh", "*.ksh", ".bashrc", ".bash_profile", ".zshrc", ".profile"},
	"sql":       {"*.sql"},
	"svelte":    {"*.svelte"},
	"swift":     {"*.swift"},
	"terraform": {"*.tf", "*.tfvars"},
	"toml":      {"*.toml"},
	"ts":        {"*.ts", "*.tsx", "*.mts", "*.cts"},
	"txt":       {"*.txt"},
	"xml":       {"*.xml", "*.xsd", "*.xsl", "*.xslt", "*.svg"},
	"yaml":      {"*.yaml", "*.yml"},
	"zig":       {"*.zig"},
	// Aliases.
	"bash":       {"*.sh", "*.bash"},
	"javascript": {"*.js", "*.jsx", "*.mjs", "*.cjs", "*.vue"},
	"markdown":   {"*.md", "*.markdown", "*.mdx", "*.mkd"},
	"python":     {"*.py", "*.pyi"},
	"ruby":       {"*.rb", "*.rake", "*.gemspec", "Gemfile", "Rakefile"},
	"rs":         {"*.rs"},
	"typescript": {"*.ts", "*.tsx", "*.mts", "*.cts"},
	"yml":        {"*.yaml", "*.yml"},
}

// SearchTypeNames returns the names SearchArgs.Type accepts, sorted.
func SearchTypeNames() []string {
	names := make([]string, 0, len(SearchTypes))
	for n := range SearchTypes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Validate checks the arguments' shape and the pattern's syntax. Globs are
// checked where they are compiled, by the agent.
func (a *SearchArgs) Validate() error {
	if a.Path == "" {
		return Errorf(CodeBadRequest, "search: path is empty (give \".\" for the working directory)")
	}
	switch a.Mode {
	case "", SearchModeContent, SearchModeFiles, SearchModeCount:
		if a.Pattern == "" {
			return Errorf(CodeBadRequest, "search: pattern is empty (mode %s needs one; use mode find to list files by glob)", a.mode())
		}
	case SearchModeFind:
		if a.Pattern != "" {
			return Errorf(CodeBadRequest, "search: mode find matches paths with glob and takes no pattern")
		}
	default:
		return Errorf(CodeBadRequest, "search: unknown mode %q (want content, files, count or find)", a.Mode)
	}
	if a.Type != "" {
		if _, ok := SearchTypes[a.Type]; !ok {
			return Errorf(CodeBadRequest, "search: unknown type %q; known types: %s", a.Type, strings.Join(SearchTypeNames(), ", "))
		}
	}
	switch {
	case a.Context < 0 || a.Context > MaxSearchContext:
		return Errorf(CodeBadRequest, "search: context %d is outside 0..%d", a.Context, MaxSearchContext)
	case a.MaxResults < 0:
		return Errorf(CodeBadRequest, "search: maxResults %d is negative", a.MaxResults)
	case a.MaxLineChars < 0:
		return Errorf(CodeBadRequest, "search: maxLineChars %d is negative", a.MaxLineChars)
	case a.MaxFileBytes < 0:
		return Errorf(CodeBadRequest, "search: maxFileBytes %d is negative", a.MaxFileBytes)
	}
	for _, g := range a.Glob {
		if strings.TrimPrefix(g, "!") == "" {
			return Errorf(CodeBadRequest, "search: empty glob %q", g)
		}
	}
	if a.Pattern != "" && !a.Literal {
		if _, err := syntax.Parse(a.Pattern, syntax.Perl); err != nil {
			return Errorf(CodeBadRequest, "search: pattern %q is not a valid RE2 regular expression: %v", a.Pattern, err)
		}
	}
	return nil
}

func (a *SearchArgs) mode() string {
	if a.Mode == "" {
		return SearchModeContent
	}
	return a.Mode
}

// Limits returns MaxResults, MaxLineChars and MaxFileBytes with their
// defaults applied and MaxResults held to MaxSearchResults.
func (a *SearchArgs) Limits() (results, lineChars int, fileBytes int64) {
	results, lineChars, fileBytes = a.MaxResults, a.MaxLineChars, a.MaxFileBytes
	if results == 0 {
		results = DefaultSearchResults
	}
	results = min(results, MaxSearchResults)
	if lineChars == 0 {
		lineChars = DefaultSearchLineChars
	}
	if fileBytes == 0 {
		fileBytes = DefaultSearchFileBytes
	}
	return results, lineChars, fileBytes
}
