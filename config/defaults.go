package config

import "cmp"

// Positive returns v when it is greater than zero, else def: the default of
// a Config field (a count, a duration) where zero and negative both mean
// unset. For fields where only zero does, cmp.Or is the same.
func Positive[T cmp.Ordered](v, def T) T {
	var zero T
	if v > zero {
		return v
	}
	return def
}
