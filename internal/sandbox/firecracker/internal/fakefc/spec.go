package fakefc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Spec is the part of a swagger 2.0 description the fake enforces.
type Spec struct {
	Info        struct{ Version string }         `yaml:"info"`
	Paths       map[string]map[string]*Operation `yaml:"paths"`
	Definitions map[string]*Schema               `yaml:"definitions"`
}

// Operation is one method of a path.
type Operation struct {
	OperationID string       `yaml:"operationId"`
	Parameters  []*Parameter `yaml:"parameters"`
}

// Parameter is a path or body parameter.
type Parameter struct {
	Name     string  `yaml:"name"`
	In       string  `yaml:"in"`
	Required bool    `yaml:"required"`
	Type     string  `yaml:"type"`
	Schema   *Schema `yaml:"schema"`
}

// Schema is a JSON schema as swagger 2.0 writes it.
type Schema struct {
	Ref                  string             `yaml:"$ref"`
	Type                 string             `yaml:"type"`
	Required             []string           `yaml:"required"`
	Properties           map[string]*Schema `yaml:"properties"`
	Enum                 []any              `yaml:"enum"`
	Items                *Schema            `yaml:"items"`
	Minimum              *float64           `yaml:"minimum"`
	Maximum              *float64           `yaml:"maximum"`
	AdditionalProperties any                `yaml:"additionalProperties"`
	ReadOnly             bool               `yaml:"readOnly"`
}

// LoadSpec reads a swagger description.
func LoadSpec(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Spec
	if err := yaml.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(s.Paths) == 0 || len(s.Definitions) == 0 {
		return nil, fmt.Errorf("%s: no paths or definitions", path)
	}
	return &s, nil
}

// Route finds the operation of method on path, and the values of the
// path's template parameters.
func (s *Spec) Route(method, path string) (*Operation, map[string]string, bool) {
	method = strings.ToLower(method)
	for tmpl, ops := range s.Paths {
		vars, ok := matchPath(tmpl, path)
		if !ok {
			continue
		}
		op, ok := ops[method]
		return op, vars, ok
	}
	return nil, nil, false
}

func matchPath(tmpl, path string) (map[string]string, bool) {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return nil, false
	}
	vars := map[string]string{}
	for i := range ts {
		if strings.HasPrefix(ts[i], "{") && strings.HasSuffix(ts[i], "}") {
			if ps[i] == "" {
				return nil, false
			}
			vars[strings.Trim(ts[i], "{}")] = ps[i]
			continue
		}
		if ts[i] != ps[i] {
			return nil, false
		}
	}
	return vars, true
}

// Body returns the operation's body parameter, if it has one.
func (op *Operation) Body() *Parameter {
	for _, p := range op.Parameters {
		if p.In == "body" {
			return p
		}
	}
	return nil
}

// ValidateBody checks a request body against the operation's body schema.
func (s *Spec) ValidateBody(op *Operation, body []byte) error {
	p := op.Body()
	if p == nil {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("this request takes no body")
		}
		return nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if p.Required {
			return fmt.Errorf("the request body is missing")
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the body is not JSON: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON body")
	}
	return s.validate(p.Schema, v, "")
}

func (s *Spec) resolve(sc *Schema) (*Schema, error) {
	for sc != nil && sc.Ref != "" {
		name, ok := strings.CutPrefix(sc.Ref, "#/definitions/")
		if !ok || s.Definitions[name] == nil {
			return nil, fmt.Errorf("unknown reference %q", sc.Ref)
		}
		sc = s.Definitions[name]
	}
	return sc, nil
}

func where(at string) string {
	if at == "" {
		return "the body"
	}
	return "`" + at + "`"
}

func (s *Spec) validate(sc *Schema, v any, at string) error {
	sc, err := s.resolve(sc)
	if err != nil {
		return err
	}
	if sc == nil {
		return nil
	}
	if sc.ReadOnly {
		return fmt.Errorf("%s is read-only", where(at))
	}
	switch sc.Type {
	case "object", "":
		obj, ok := v.(map[string]any)
		if !ok {
			if sc.Type == "" && sc.Properties == nil {
				return nil
			}
			return fmt.Errorf("invalid type for %s: expected an object", where(at))
		}
		if sc.AdditionalProperties == nil || sc.AdditionalProperties == false {
			for k := range obj {
				if _, ok := sc.Properties[k]; !ok {
					return fmt.Errorf("unknown field `%s`, expected one of %s", join(at, k), s.expected(sc))
				}
			}
		}
		for _, r := range sc.Required {
			if _, ok := obj[r]; !ok {
				return fmt.Errorf("missing field `%s`", join(at, r))
			}
		}
		for k, val := range obj {
			if ps := sc.Properties[k]; ps != nil {
				if err := s.validate(ps, val, join(at, k)); err != nil {
					return err
				}
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("invalid type for %s: expected an array", where(at))
		}
		for i, e := range arr {
			if err := s.validate(sc.Items, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("invalid type for %s: expected a string", where(at))
		}
		if len(sc.Enum) > 0 && !inEnum(sc.Enum, str) {
			return fmt.Errorf("unknown variant `%s` of %s, expected one of %v", str, where(at), sc.Enum)
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("invalid type for %s: expected an integer", where(at))
		}
		i, err := n.Int64()
		if err != nil {
			return fmt.Errorf("invalid value for %s: %s is not an integer", where(at), n)
		}
		if sc.Minimum != nil && float64(i) < *sc.Minimum || sc.Maximum != nil && float64(i) > *sc.Maximum {
			return fmt.Errorf("invalid value for %s: %d is outside [%v, %v]", where(at), i, bound(sc.Minimum, math.Inf(-1)), bound(sc.Maximum, math.Inf(1)))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("invalid type for %s: expected a boolean", where(at))
		}
	default:
		return fmt.Errorf("the description has a type %q this fake does not know", sc.Type)
	}
	return nil
}

func bound(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func inEnum(enum []any, s string) bool {
	for _, e := range enum {
		if fmt.Sprint(e) == s {
			return true
		}
	}
	return false
}

func (s *Spec) expected(sc *Schema) string {
	keys := make([]string, 0, len(sc.Properties))
	for k := range sc.Properties {
		keys = append(keys, "`"+k+"`")
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}
