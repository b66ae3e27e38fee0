package protocol

import "testing"

func TestSearchArgsValidate(t *testing.T) {
	for _, tc := range []struct {
		args SearchArgs
		ok   bool
	}{
		{SearchArgs{Path: ".", Pattern: "x"}, true},
		{SearchArgs{Path: ".", Pattern: "a(", Literal: true}, true},
		{SearchArgs{Path: ".", Mode: SearchModeFind, Glob: []string{"**/*.go"}}, true},
		{SearchArgs{Path: ".", Pattern: "x", Type: "go", Context: MaxSearchContext, MaxResults: 10 * MaxSearchResults}, true},
		{SearchArgs{Pattern: "x"}, false},
		{SearchArgs{Path: "."}, false},
		{SearchArgs{Path: ".", Mode: SearchModeCount}, false},
		{SearchArgs{Path: ".", Mode: SearchModeFind, Pattern: "x"}, false},
		{SearchArgs{Path: ".", Mode: "grep", Pattern: "x"}, false},
		{SearchArgs{Path: ".", Pattern: "a("}, false},
		{SearchArgs{Path: ".", Pattern: "x", Type: "cobol"}, false},
		{SearchArgs{Path: ".", Pattern: "x", Context: -1}, false},
		{SearchArgs{Path: ".", Pattern: "x", Context: MaxSearchContext + 1}, false},
		{SearchArgs{Path: ".", Pattern: "x", MaxResults: -1}, false},
		{SearchArgs{Path: ".", Pattern: "x", Glob: []string{"!"}}, false},
	} {
		err := tc.args.Validate()
		if (err == nil) != tc.ok || (err != nil && !HasCode(err, CodeBadRequest)) {
			t.Errorf("%+v: %v", tc.args, err)
		}
	}
	r, c, f := (&SearchArgs{MaxResults: 10 * MaxSearchResults}).Limits()
	if r != MaxSearchResults || c != DefaultSearchLineChars || f != DefaultSearchFileBytes {
		t.Errorf("limits %d %d %d", r, c, f)
	}
	for _, name := range SearchTypeNames() {
		if len(SearchTypes[name]) == 0 {
			t.Errorf("type %s has no globs", name)
		}
	}
}
