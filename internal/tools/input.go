package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// InputError is an input that does not fit the tool's schema. Its message
// names the field and says what was expected, for a model to fix.
type InputError struct {
	Tool  string
	Field string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: invalid input: %s", e.Tool, e.Msg)
	}
	return fmt.Sprintf("%s: invalid input: %q %s", e.Tool, e.Field, e.Msg)
}

// coerce turns a model's arguments into the JSON the tool decodes. Models
// send numbers as strings, booleans as "true", a lone string for a list, or
// the whole object JSON-encoded in a string; those are repaired. Anything
// else that does not fit the schema is an InputError.
func coerce(t *Tool, raw json.RawMessage) ([]byte, error) {
	var v any
	if len(strings.TrimSpace(string(raw))) == 0 {
		v = map[string]any{}
	} else {
		d := json.NewDecoder(strings.NewReader(string(raw)))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, &InputError{Tool: t.Name, Msg: "not JSON: " + err.Error()}
		}
	}
	if s, ok := v.(string); ok { // the object, JSON-encoded once more
		var inner any
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		if d.Decode(&inner) == nil {
			v = inner
		}
	}
	if v == nil {
		v = map[string]any{}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &InputError{Tool: t.Name, Msg: fmt.Sprintf("want a JSON object, got %s", jsonKind(v))}
	}
	for k, val := range obj {
		p, ok := t.Schema.Properties[k]
		if !ok {
			if !closed(t.Schema) {
				continue // the schema allows fields it does not describe
			}
			return nil, &InputError{Tool: t.Name, Field: k, Msg: "is not a field of this tool; fields: " + strings.Join(fieldNames(t.Schema), ", ")}
		}
		if val == nil { // null means "not given"
			delete(obj, k)
			continue
		}
		c, err := coerceValue(p, val)
		if err != nil {
			return nil, &InputError{Tool: t.Name, Field: k, Msg: err.Error()}
		}
		obj[k] = c
	}
	for _, r := range t.Schema.Required {
		if _, ok := obj[r]; !ok {
			return nil, &InputError{Tool: t.Name, Field: r, Msg: "is required"}
		}
	}
	for k, val := range obj {
		p, ok := t.Schema.Properties[k]
		if !ok {
			continue
		}
		if str, ok := val.(string); ok && p.Pattern != "" {
			if re, err := regexp.Compile(p.Pattern); err == nil && !re.MatchString(str) {
				return nil, &InputError{Tool: t.Name, Field: k, Msg: fmt.Sprintf("is empty or malformed (must match %s)", p.Pattern)}
			}
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, val) {
			return nil, &InputError{Tool: t.Name, Field: k, Msg: fmt.Sprintf("must be one of %s, got %v", enumList(p.Enum), val)}
		}
		if n, ok := val.(json.Number); ok {
			f, _ := n.Float64()
			if p.Minimum != nil && f < *p.Minimum || p.Maximum != nil && f > *p.Maximum {
				return nil, &InputError{Tool: t.Name, Field: k, Msg: fmt.Sprintf("must be between %v and %v, got %v", num(p.Minimum), num(p.Maximum), n)}
			}
		}
	}
	if err := t.resolved.Validate(plain(obj)); err != nil { // what the checks above do not cover
		return nil, &InputError{Tool: t.Name, Msg: err.Error()}
	}
	return json.Marshal(obj)
}

// coerceValue fits one value to its property schema.
func coerceValue(p *jsonschema.Schema, v any) (any, error) {
	typ := p.Type
	if typ == "" && len(p.Types) > 0 {
		for _, t := range p.Types {
			if t != "null" {
				typ = t
			}
		}
	}
	switch typ {
	case "string":
		switch x := v.(type) {
		case string:
			return x, nil
		case json.Number:
			return x.String(), nil
		case bool:
			return strconv.FormatBool(x), nil
		}
	case "integer", "number":
		var n json.Number
		switch x := v.(type) {
		case json.Number:
			n = x
		case string:
			n = json.Number(strings.TrimSpace(x))
		default:
			return nil, fmt.Errorf("must be a %s, got %s", typ, jsonKind(v))
		}
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("must be a %s, got %q", typ, n.String())
		}
		if typ == "integer" {
			if f != math.Trunc(f) {
				return nil, fmt.Errorf("must be a whole number, got %v", n)
			}
			return json.Number(strconv.FormatInt(int64(f), 10)), nil
		}
		return n, nil
	case "boolean":
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			switch strings.ToLower(strings.TrimSpace(x)) {
			case "true", "yes", "1":
				return true, nil
			case "false", "no", "0", "":
				return false, nil
			}
		case json.Number:
			switch x.String() {
			case "1":
				return true, nil
			case "0":
				return false, nil
			}
		}
	case "array":
		switch x := v.(type) {
		case []any:
			if p.Items != nil {
				for i, e := range x {
					c, err := coerceValue(p.Items, e)
					if err != nil {
						return nil, fmt.Errorf("item %d %s", i, err)
					}
					x[i] = c
				}
			}
			return x, nil
		case string: // a JSON array in a string, or one element
			var arr []any
			d := json.NewDecoder(strings.NewReader(x))
			d.UseNumber()
			if strings.HasPrefix(strings.TrimSpace(x), "[") && d.Decode(&arr) == nil {
				return coerceValue(p, arr)
			}
			return coerceValue(p, []any{x})
		case map[string]any:
			return coerceValue(p, []any{x})
		}
	case "object":
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if q, ok := p.Properties[k]; ok && e != nil {
					c, err := coerceValue(q, e)
					if err != nil {
						return nil, fmt.Errorf("field %q %s", k, err)
					}
					x[k] = c
				}
			}
			return x, nil
		case string:
			var obj map[string]any
			d := json.NewDecoder(strings.NewReader(x))
			d.UseNumber()
			if d.Decode(&obj) == nil {
				return coerceValue(p, obj)
			}
		}
	default:
		return v, nil
	}
	return nil, fmt.Errorf("must be a %s, got %s", typ, jsonKind(v))
}

// plain converts json.Numbers to float64 for the schema validator.
func plain(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return v
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func fieldNames(s *jsonschema.Schema) []string {
	if len(s.PropertyOrder) > 0 {
		return s.PropertyOrder
	}
	var out []string
	for k := range s.Properties {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func enumList(vals []any) string {
	var b []string
	for _, v := range vals {
		b = append(b, fmt.Sprint(v))
	}
	return strings.Join(b, ", ")
}

func num(f *float64) any {
	if f == nil {
		return "any"
	}
	return *f
}

// closed reports whether s refuses properties it does not list
// ("additionalProperties": false).
func closed(s *jsonschema.Schema) bool {
	a := s.AdditionalProperties
	return a != nil && a.Not != nil && a.Not.Type == "" && len(a.Not.Types) == 0 && len(a.Not.Properties) == 0
}
