package experiment

// The experiments of the related methods (related-methods spec): MUHMM
// (multiplicative-stochastic_002), OnlineEM (online-em-nmf_003) and EPCA
// (epca_004). Their rows are Records, like SampleSize's; the x of a row
// (Transitions) is whatever the experiment's figure has on its x axis
// (iterations, transitions, observations, bases).

// checkpoints returns 1, 2, 5, 10, 20, 50, ... up to max (and max).
func checkpoints(maxX int) []int {
	var out []int
	for base := 1; base <= maxX; base *= 10 {
		for _, f := range []int{1, 2, 5} {
			if f*base <= maxX {
				out = append(out, f*base)
			}
		}
	}
	if out[len(out)-1] != maxX {
		out = append(out, maxX)
	}
	return out
}
