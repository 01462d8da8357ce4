"""The words of the families' findings: one sentence template per finding code, worded
from its facts. ``qkv check``'s report (:mod:`qkvcli.render.check`) and chapter 26's
(:mod:`qkvcli.render.wording`, a cross pair its independence family found) both say a
finding in these words."""

from __future__ import annotations

FINDING_WORDS = {
    "changed-argument": "{0} changed its argument {1} from {2} to {3}",
    "moved": "changing {0} changed {1} from {2} to {3}",
    "reshaped": "changing {0} changed the shape of {1}",
    "unmoved": "changing {0} left {1} unchanged",
    "replay-differs": "second {0} differs: {1} was {2}, then {3}",
    "replay-failed": "second {0} failed: {1}",
    "probe-failed": "{0} on the {1} {2} failed: {3}",
    "probe-shape": "{0} {1}: {2} has shape {3}, expected {4}",
    "not-identity": ("turned as if at position 0, {0} = {1}, expected the input's {2}: position 0 is "
                     "not the identity"),
    "prefix-moved": ("changing the last token's input changed {0} from {1} to {2}: an earlier "
                     "position sees a later key"),
    "last-unmoved": "changing the last token's input left {0}[:,{1}] unchanged",
    "one-token": "with one token, {0} = {1}, expected exactly {2}",
    "shift-moved": ("moving every position by {0} changed {1} from {2} to {3}: the rotated "
                    "tokens' dot products depend on more than their distance"),
    "step-differs": ("the cached step at position {0} gives {1} = {2}, the causal pass over its "
                     "prefix {3}"),
    "cache-differs": "the cache holds {0} = {1}, the causal pass over the prefix {2}",
    "length-differs": "after the step at position {0} the cache holds {1} positions, expected {2}",
    "cache-slip": "{0}: {1}",
    "refusal-failed": ("the run with {0} failed instead of refusing the step and going on: "
                       "{1}"),
    "refusal-differs": "the run with {0} gives {1} = {2}, a cache that refuses the step {3}",
}
"""The words of each finding code of :data:`~qkvcli.check.result.FINDINGS`."""
