package main_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// E2B's official JavaScript SDK (npm e2b, 2.x) drives neurons through
// serve --e2b, as a user's program would: testdata/e2b/sdk.cjs makes every
// call it supports and checks each. NSYS_CORTEX_TEST_E2B_SDK names the
// node_modules directory that holds the SDK (.ci/run installs it); where
// it is unset the test skips, unless NSYS_CORTEX_REQUIRE_E2B=1 (CI).
func TestE2BSDK(t *testing.T) {
	sdk := os.Getenv("NSYS_CORTEX_TEST_E2B_SDK")
	node, err := exec.LookPath("node")
	if sdk == "" || err != nil {
		if os.Getenv("NSYS_CORTEX_REQUIRE_E2B") == "1" {
			t.Fatalf("E2B's SDK is required here: NSYS_CORTEX_TEST_E2B_SDK=%q, node: %v", sdk, err)
		}
		t.Skip("no E2B SDK: set NSYS_CORTEX_TEST_E2B_SDK to a node_modules directory with npm's e2b")
	}
	mode := "process"
	if slices.Contains(modes(t), "nsbox") {
		mode = "nsbox"
	}
	c := newCLI(t, mode)
	const domain = "cortex.localhost"
	url, _ := c.serveWith(t, []string{"--e2b", "--domain", domain})
	out := strings.Split(strings.TrimSpace(c.ok("token", "create", "--e2b", "sdk")), "\n")
	key := out[len(out)-1]
	if !strings.HasPrefix(key, "e2b_") {
		t.Fatalf("token create --e2b: the last line is %q", key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/e2b/sdk.cjs")
	cmd.Env = append(os.Environ(), "NODE_PATH="+sdk, "E2B_API_KEY="+key,
		"E2B_API_URL="+url+"/e2b", "E2B_SANDBOX_URL="+url+"/e2b/sandbox", "E2B_TEST_DOMAIN="+domain)
	got, err := cmd.CombinedOutput()
	t.Logf("the SDK's program (mode %s):\n%s", mode, got)
	if err != nil {
		t.Fatalf("E2B's SDK against serve --e2b: %v", err)
	}
}
