package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// writeTable prints an operator command's table to w: the header, then each
// line that rows emits (cells separated by tabs, in fmt's format), as
// aligned columns, then footer (the count line) on a line of its own.
func writeTable(w io.Writer, header string, rows func(line func(format string, args ...any)), footer string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) })
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, footer)
	return err
}
