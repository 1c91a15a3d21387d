package host

import "testing"

func TestClampLimit(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 50}, {-3, 50}, {7, 7}, {200, 200}, {500, 200}} {
		if got := ClampLimit(c.n, 50, 200); got != c.want {
			t.Errorf("ClampLimit(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
