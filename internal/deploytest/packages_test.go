package deploytest

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// TestDevelopingPackageTable: every package of the module is in the package
// table of docs/DEVELOPING.md, by its own row or by a row naming a parent
// folder (`tools/`, `services/*`), so the table matches the tree.
func TestDevelopingPackageTable(t *testing.T) {
	t.Parallel()
	doc := testenv.ReadFile(t, filepath.Join(root(t), "docs", "DEVELOPING.md"))
	var rows []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			rows = append(rows, strings.TrimSuffix(strings.TrimSuffix(m[1], "*"), "/"))
		}
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/relaystation/relay/"
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, module)
		covered := false
		for _, r := range rows {
			if rel == r || (r != "internal" && strings.HasPrefix(rel, r+"/")) {
				covered = true
				break
			}
		}
		if !covered {
			t.Errorf("package %s is not in the package table of docs/DEVELOPING.md", rel)
		}
	}
}
