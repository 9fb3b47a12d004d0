package bundle

import (
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	t.Parallel()
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	b := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n11\n"
	// As diff -u prints it.
	want := "--- f\n+++ f\n@@ -2,9 +2,10 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n 9\n 10\n+11\n"
	if got := unifiedDiff("f", []byte(a), []byte(b)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	b = "one\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ntwelve\n"
	want = "--- f\n+++ f\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+twelve\n"
	if got := unifiedDiff("f", []byte(a), []byte(b)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := unifiedDiff("f", []byte(a), []byte(a)); got != "" {
		t.Errorf("equal files: got %q", got)
	}
	if got := unifiedDiff("f", nil, []byte("{}\n")); got != "--- f\n+++ f\n@@ -0,0 +1,1 @@\n+{}\n" {
		t.Errorf("new file: got %q", got)
	}
	big := strings.Repeat("x\n", 3000)
	if got := unifiedDiff("f", []byte(big), []byte(big+"y\n")); !strings.HasPrefix(got, "--- f\n+++ f\n@@ -1,3000 +1,3001 @@\n") {
		t.Errorf("big file: got %.80q", got)
	}
}
