package bundle

import (
	"bytes"
	"fmt"
	"strings"
)

// unifiedDiff is the change from a to b as a unified diff with three lines
// of context ("" when equal). mcp.json files are small: a plain LCS table
// is enough.
func unifiedDiff(name string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	x, y := splitLines(a), splitLines(b)
	if len(x)*len(y) > maxDiffCells {
		return replaceAll(name, x, y)
	}
	ops := diffOps(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", name, name)
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		start, end := max(0, k-diffContext), hunkEnd(ops, k)
		writeHunk(&out, ops[start:end])
		k = end
	}
	return out.String()
}

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

// diffOp is one line of an edit script.
type diffOp struct {
	kind byte // ' ', '-', '+'
	text string
	ai   int // line index in a (for ' ' and '-')
	bi   int // line index in b (for ' ' and '+')
}

// replaceAll is the diff of inputs too big for the LCS table: one hunk
// replacing every line of x with every line of y.
func replaceAll(name string, x, y []string) string {
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n@@ -1,%d +1,%d @@\n", name, name, len(x), len(y))
	for _, l := range x {
		out.WriteString("-" + l + "\n")
	}
	for _, l := range y {
		out.WriteString("+" + l + "\n")
	}
	return out.String()
}

// diffOps is the edit script turning x into y, read off the table of the
// lengths of their longest common subsequences; a removal comes before the
// addition that replaces it.
func diffOps(x, y []string) []diffOp {
	lcs := lcsTable(x, y)
	n, m := len(x), len(y)
	var ops []diffOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			ops = append(ops, diffOp{' ', x[i], i, j})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, diffOp{'-', x[i], i, j})
			i++
		default:
			ops = append(ops, diffOp{'+', y[j], i, j})
			j++
		}
	}
	return ops
}

// lcsTable returns t with t[i][j] the length of the longest common
// subsequence of x[i:] and y[j:].
func lcsTable(x, y []string) [][]int {
	n, m := len(x), len(y)
	t := make([][]int, n+1)
	for i := range t {
		t[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	return t
}

// hunkEnd returns where the hunk holding the change at ops[k] ends: it
// takes in every later change separated by at most 2*diffContext unchanged
// lines, then diffContext lines of trailing context.
func hunkEnd(ops []diffOp, k int) int {
	end := k
	for end < len(ops) {
		if ops[end].kind != ' ' {
			end++
			continue
		}
		run := end
		for run < len(ops) && ops[run].kind == ' ' {
			run++
		}
		if run == len(ops) || run-end > 2*diffContext {
			return min(run, end+diffContext)
		}
		end = run
	}
	return end
}

// writeHunk writes one hunk: its @@ header (a side with no lines starts
// at the line before, as diff -u does) and its lines.
func writeHunk(out *strings.Builder, hunk []diffOp) {
	var aLen, bLen int
	for _, o := range hunk {
		if o.kind != '+' {
			aLen++
		}
		if o.kind != '-' {
			bLen++
		}
	}
	aStart, bStart := hunk[0].ai+1, hunk[0].bi+1
	if aLen == 0 {
		aStart--
	}
	if bLen == 0 {
		bStart--
	}
	fmt.Fprintf(out, "@@ -%d,%d +%d,%d @@\n", aStart, aLen, bStart, bLen)
	for _, o := range hunk {
		out.WriteByte(o.kind)
		out.WriteString(o.text)
		out.WriteByte('\n')
	}
}

// maxDiffCells bounds the LCS table (about 32 MB).
const maxDiffCells = 4 << 20

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.Split(s, "\n")
}
