package api_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	cortex "github.com/nsys-cortex/cortex/client"
	"github.com/nsys-cortex/cortex/internal/api"
	"github.com/nsys-cortex/cortex/internal/sandbox"
)

// The spec is checked without a YAML library: a small line scanner reads
// the parts of api/openapi.yaml the checks need. It relies on the file's
// block style (2-space indentation, one key a line), which
// TestSpecScannerSeesProblems keeps honest.

const specFile = "../../api/openapi.yaml"

// servedRoutes lists "METHOD PATTERN" of every route the server answers.
func servedRoutes(t *testing.T) []string {
	t.Helper()
	srv := api.New(api.Options{Set: sandbox.NewSet(sandbox.Env{})})
	if srv == nil || srv.Handler() == nil {
		t.Fatal("api.New over an empty set gave no server")
	}
	var out []string
	for _, r := range srv.Routes() {
		// {path...} is OpenAPI's {path}: the rest of the path.
		out = append(out, r.Method+" "+strings.ReplaceAll(r.Pattern, "...}", "}"))
	}
	return append(out, "GET /metrics") // served besides Routes, see New
}

func readSpec(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// specLine is one line of the spec: its number, indentation and text
// (without the indentation and trailing blanks; "" for blank lines and
// comments).
type specLine struct {
	n, indent int
	text      string
}

func specLines(spec string) ([]specLine, []string) {
	var (
		out      []specLine
		problems []string
	)
	for i, raw := range strings.Split(spec, "\n") {
		raw = strings.TrimRight(raw, " \r")
		text := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(text)
		if strings.HasPrefix(text, "\t") {
			problems = append(problems, fmt.Sprintf("line %d: a tab in the indentation", i+1))
		}
		if strings.HasPrefix(text, "#") {
			text = ""
		}
		out = append(out, specLine{n: i + 1, indent: indent, text: text})
	}
	return out, problems
}

// section returns the lines under the top-level key, up to the next
// top-level key.
func section(lines []specLine, key string) []specLine {
	for i, l := range lines {
		if l.indent != 0 || l.text != key+":" {
			continue
		}
		for j, m := range lines[i+1:] {
			if m.text != "" && m.indent == 0 {
				return lines[i+1 : i+1+j]
			}
		}
		return lines[i+1:]
	}
	return nil
}

// block returns the lines after lines[i] that are indented deeper than it.
func block(lines []specLine, i int) []specLine {
	for j, m := range lines[i+1:] {
		if m.text != "" && m.indent <= lines[i].indent {
			return lines[i+1 : i+1+j]
		}
	}
	return lines[i+1:]
}

// mapKey returns the key of a "key:" line with nothing after the colon.
func mapKey(text string) (string, bool) {
	k, ok := strings.CutSuffix(text, ":")
	if !ok || strings.Contains(k, ": ") {
		return "", false
	}
	return unquote(k), true
}

// keyValue splits "key: value".
func keyValue(text string) (key, value string, ok bool) {
	k, v, ok := strings.Cut(text, ":")
	if !ok {
		return "", "", false
	}
	return unquote(strings.TrimSpace(k)), unquote(strings.TrimSpace(v)), true
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

var methods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// specOp is one operation of the spec's paths section.
type specOp struct {
	method, path string // "GET", "/v1/neurons/{id}"
	line         int
	body         []specLine // the lines under the method key
}

func (o *specOp) String() string { return o.method + " " + o.path }

// specOperations scans the paths section: a path is a key at indent 2
// starting with "/", an operation a method key at indent 4 under it.
func specOperations(lines []specLine) ([]*specOp, []string) {
	var (
		ops      []*specOp
		problems []string
		path     string
	)
	sec := section(lines, "paths")
	if sec == nil {
		return nil, []string{"the spec has no top-level paths: section"}
	}
	for i, l := range sec {
		switch {
		case l.text == "":
		case l.indent == 2:
			path = ""
			k, ok := mapKey(l.text)
			switch {
			case ok && strings.HasPrefix(k, "/"):
				path = k
			case ok && strings.HasPrefix(k, "x-"):
			default:
				problems = append(problems, fmt.Sprintf("line %d: %q under paths is not a path key", l.n, l.text))
			}
		case l.indent == 4 && path != "":
			k, ok := mapKey(l.text)
			if ok && slices.Contains(methods, k) {
				ops = append(ops, &specOp{method: strings.ToUpper(k), path: path, line: l.n, body: block(sec, i)})
			}
		case l.indent < 4:
			problems = append(problems, fmt.Sprintf("line %d: indentation %d under paths (want multiples of 2)", l.n, l.indent))
		}
	}
	return ops, problems
}

// components maps kind ("schemas", "responses", ...) to name to the lines
// of its definition.
func components(lines []specLine) map[string]map[string][]specLine {
	out := map[string]map[string][]specLine{}
	sec := section(lines, "components")
	kind := ""
	for i, l := range sec {
		switch {
		case l.text == "":
		case l.indent == 2:
			kind, _ = mapKey(l.text)
			if out[kind] == nil {
				out[kind] = map[string][]specLine{}
			}
		case l.indent == 4 && kind != "":
			if name, ok := mapKey(l.text); ok {
				out[kind][name] = block(sec, i)
			}
		}
	}
	return out
}

// listItems returns the block-list items under lines[i] (a "key:" line):
// for each item, its "key: value" pairs.
func listItems(lines []specLine, i int) []map[string]string {
	var (
		items     []map[string]string
		cur       map[string]string
		dashLevel = -1
	)
	for _, l := range block(lines, i) {
		if l.text == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(l.text, "- "); ok && (dashLevel < 0 || l.indent == dashLevel) {
			dashLevel = l.indent
			cur = map[string]string{}
			items = append(items, cur)
			if k, v, ok := keyValue(rest); ok {
				cur[k] = v
			}
			continue
		}
		if cur != nil && l.indent == dashLevel+2 {
			if k, v, ok := keyValue(l.text); ok {
				cur[k] = v
			}
		}
	}
	return items
}

var pathParam = regexp.MustCompile(`\{([^{}]+)\}`)

// pathParamProblems checks that each operation declares every parameter of
// its path as "in: path", and no other.
func pathParamProblems(ops []*specOp, comps map[string]map[string][]specLine) []string {
	var problems []string
	for _, op := range ops {
		declared := map[string]bool{}
		for i, l := range op.body {
			if l.indent != 6 || l.text != "parameters:" {
				continue
			}
			for _, item := range listItems(op.body, i) {
				if ref, ok := item["$ref"]; ok { // a shared parameter
					name, found := strings.CutPrefix(ref, "#/components/parameters/")
					def, exists := comps["parameters"][name]
					if !found || !exists {
						continue // reported by refProblems
					}
					item = map[string]string{}
					for _, d := range def {
						if d.indent == 6 {
							if k, v, ok := keyValue(d.text); ok {
								item[k] = v
							}
						}
					}
				}
				if item["in"] == "path" {
					declared[item["name"]] = true
				}
			}
		}
		want := map[string]bool{}
		for _, m := range pathParam.FindAllStringSubmatch(op.path, -1) {
			want[m[1]] = true
			if !declared[m[1]] {
				problems = append(problems, fmt.Sprintf("line %d: %s does not declare its path parameter %q (- name: %s, in: path)", op.line, op, m[1], m[1]))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(declared)) {
			if !want[name] {
				problems = append(problems, fmt.Sprintf("line %d: %s declares path parameter %q, which is not in its path", op.line, op, name))
			}
		}
	}
	return problems
}

// refProblems checks that every local $ref names a defined component.
func refProblems(lines []specLine, comps map[string]map[string][]specLine) []string {
	var problems []string
	for _, l := range lines {
		_, after, ok := strings.Cut(l.text, "$ref:")
		if !ok {
			continue
		}
		ref := unquote(strings.TrimSpace(after))
		parts := strings.Split(ref, "/")
		if len(parts) != 4 || parts[0] != "#" || parts[1] != "components" {
			problems = append(problems, fmt.Sprintf("line %d: $ref %q is not #/components/KIND/NAME", l.n, ref))
			continue
		}
		if _, ok := comps[parts[2]][parts[3]]; !ok {
			problems = append(problems, fmt.Sprintf("line %d: $ref %q names no component (components/%s has no %s)", l.n, ref, parts[2], parts[3]))
		}
	}
	return problems
}

// specProblems lists everything wrong with spec against the served routes.
func specProblems(spec string, served []string) []string {
	lines, problems := specLines(spec)
	ops, p := specOperations(lines)
	problems = append(problems, p...)
	comps := components(lines)
	if len(comps["schemas"]) == 0 {
		problems = append(problems, "the spec has no components/schemas")
	}

	inSpec := map[string]bool{}
	opIDs := map[string]int{}
	for _, op := range ops {
		if inSpec[op.String()] {
			problems = append(problems, fmt.Sprintf("line %d: %s is in the spec twice", op.line, op))
		}
		inSpec[op.String()] = true
		if !slices.Contains(served, op.String()) {
			problems = append(problems, fmt.Sprintf("line %d: %s is in api/openapi.yaml but not served", op.line, op))
		}
		var id string
		hasSummary := false
		for _, l := range op.body {
			if l.indent != 6 {
				continue
			}
			if k, v, ok := keyValue(l.text); ok && k == "operationId" {
				id = v
			}
			if strings.HasPrefix(l.text, "summary:") {
				hasSummary = true
			}
		}
		switch {
		case id == "":
			problems = append(problems, fmt.Sprintf("line %d: %s has no operationId", op.line, op))
		case opIDs[id] != 0:
			problems = append(problems, fmt.Sprintf("line %d: %s repeats operationId %q of line %d", op.line, op, id, opIDs[id]))
		default:
			opIDs[id] = op.line
		}
		if !hasSummary {
			problems = append(problems, fmt.Sprintf("line %d: %s has no summary", op.line, op))
		}
	}
	for _, r := range served {
		if !inSpec[r] {
			problems = append(problems, fmt.Sprintf("%s is served but missing from api/openapi.yaml", r))
		}
	}
	problems = append(problems, pathParamProblems(ops, comps)...)
	problems = append(problems, refProblems(lines, comps)...)
	return problems
}

func TestOpenAPISpecMatchesRoutes(t *testing.T) {
	served := servedRoutes(t)
	if len(served) < 2 {
		t.Fatalf("only %d routes served", len(served))
	}
	for _, p := range specProblems(readSpec(t), served) {
		t.Error(p)
	}
}

// specErrorCodes returns the enum of the ErrorCode schema.
func specErrorCodes(spec string) ([]string, error) {
	lines, _ := specLines(spec)
	def, ok := components(lines)["schemas"]["ErrorCode"]
	if !ok {
		return nil, fmt.Errorf("components/schemas has no ErrorCode")
	}
	for i, l := range def {
		k, v, _ := keyValue(l.text)
		if k != "enum" {
			continue
		}
		if v != "" { // enum: [A, B]
			var out []string
			for _, c := range strings.Split(strings.Trim(v, "[]"), ",") {
				out = append(out, unquote(strings.TrimSpace(c)))
			}
			return out, nil
		}
		var out []string
		for _, m := range def[i+1:] {
			c, ok := strings.CutPrefix(m.text, "- ")
			if m.text != "" && (!ok || m.indent < l.indent) {
				break
			}
			if ok {
				out = append(out, unquote(strings.TrimSpace(c)))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("the ErrorCode schema has no enum")
}

func TestOpenAPISpecErrorCodes(t *testing.T) {
	spec := readSpec(t)
	codes, err := specErrorCodes(spec)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(codes)
	statuses := map[string]int{}
	for _, c := range cortex.Codes() {
		statuses[string(c)] = c.HTTPStatus()
	}
	want := slices.Sorted(maps.Keys(statuses))
	if !slices.Equal(codes, want) {
		t.Errorf("the spec's ErrorCode enum is\n  %v\nbut cortex.Codes has\n  %v", codes, want)
	}

	// The table of statuses in the info description says the same.
	row := regexp.MustCompile("^\\| `([A-Z_]+)` +\\| ([0-9]{3}) +\\|$")
	table := map[string]int{}
	lines, _ := specLines(spec)
	for _, l := range section(lines, "info") {
		if m := row.FindStringSubmatch(l.text); m != nil {
			table[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	if !maps.Equal(table, statuses) {
		t.Errorf("the info description's status table is\n  %v\nbut the codes' HTTPStatus is\n  %v", table, statuses)
	}
}

// TestSpecScannerSeesProblems breaks the spec in the ways the checks are
// for and makes sure each is reported: a scanner that read nothing would
// otherwise pass.
func TestSpecScannerSeesProblems(t *testing.T) {
	spec := readSpec(t)
	served := servedRoutes(t)
	lines, _ := specLines(spec)
	ops, _ := specOperations(lines)
	if len(ops) != len(served) {
		t.Fatalf("the scanner found %d operations, the server serves %d routes", len(ops), len(served))
	}

	// cut removes the block of the line equal to key (indented as given).
	cut := func(t *testing.T, spec, key string) string {
		t.Helper()
		ls := strings.Split(spec, "\n")
		for i, l := range ls {
			if l != key {
				continue
			}
			indent := len(l) - len(strings.TrimLeft(l, " "))
			j := i + 1
			for j < len(ls) {
				m := ls[j]
				if strings.TrimSpace(m) != "" && len(m)-len(strings.TrimLeft(m, " ")) <= indent {
					break
				}
				j++
			}
			return strings.Join(append(ls[:i:i], ls[j:]...), "\n")
		}
		t.Fatalf("the spec has no line %q", key)
		return ""
	}
	replace := func(t *testing.T, spec, old, new string) string {
		t.Helper()
		if !strings.Contains(spec, old) {
			t.Fatalf("the spec has no %q", old)
		}
		return strings.Replace(spec, old, new, 1)
	}
	cases := []struct {
		name, spec, want string
	}{
		{"path removed", cut(t, spec, "  /v1/health:"),
			"GET /v1/health is served but missing"},
		{"operation removed", cut(t, spec, "    delete:"), // the first delete: DELETE /v1/neurons/{id}
			"DELETE /v1/neurons/{id} is served but missing"},
		{"metrics removed", cut(t, spec, "  /metrics:"),
			"GET /metrics is served but missing"},
		{"operation not served", replace(t, spec, "  /v1/health:\n", "  /v1/health:\n    patch:\n      operationId: x\n      summary: x\n"),
			"PATCH /v1/health is in api/openapi.yaml but not served"},
		{"path not served", replace(t, spec, "  /v1/neurons/{id}/files/stat:", "  /v1/neurons/{id}/files/stats:"),
			"GET /v1/neurons/{id}/files/stats is in api/openapi.yaml but not served"},
		{"path parameter undeclared", replace(t, spec, "        - name: pid\n          in: path", "        - name: pid\n          in: query"),
			`does not declare its path parameter "pid"`},
		{"broken schema ref", replace(t, spec, "$ref: '#/components/schemas/Health'", "$ref: '#/components/schemas/Healthy'"),
			"components/schemas has no Healthy"},
		{"schema removed", cut(t, spec, "    Chunk:"),
			"components/schemas has no Chunk"},
		{"operationId removed", replace(t, spec, "      operationId: getHealth\n", ""),
			"GET /v1/health has no operationId"},
	}
	for _, c := range cases {
		problems := specProblems(c.spec, served)
		found := slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) })
		if !found {
			t.Errorf("%s: no problem %q reported; got %q", c.name, c.want, problems)
		}
	}

	codes, err := specErrorCodes(replace(t, spec, "        - TIMEOUT\n", ""))
	if err != nil || slices.Contains(codes, "TIMEOUT") || len(codes) != len(cortex.Codes())-1 {
		t.Errorf("a code removed from the enum: got %v, %v", codes, err)
	}
}
