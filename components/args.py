"""What every component's args model shares: one frozen pydantic base, and the input type.

pydantic cannot validate `pulumi.Input`, so a value another resource produces is typed as
`StrInput` (a plain string or an Output) and the base allows such arbitrary types; `frozen`
and `extra="forbid"` make a misspelt or mutated argument an error at construction.
"""

from __future__ import annotations

import pulumi
from pydantic import BaseModel, ConfigDict

# A plain string or another resource's output.
StrInput = str | pulumi.Output[str]


class ComponentArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
