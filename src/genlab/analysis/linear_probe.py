"""Linear probe on frozen discriminator features (Dai thesis App. B.8.5, Table B.3): the activations feeding
the discriminator's final linear layer are extracted in eval mode, standardised on the training split, and a
multinomial logistic regression (scikit-learn) is fitted on them; the score is its test error in percent."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn


@torch.no_grad()
def extract_features(discriminator: nn.Module, x: Tensor, batch: int = 1024) -> np.ndarray:
    """``discriminator.features(x)`` in eval mode (BN running statistics, no dropout), as float64 numpy."""
    if not hasattr(discriminator, "features"):
        raise TypeError(f"{type(discriminator).__name__} has no features(x) method to probe")
    was = discriminator.training
    discriminator.eval()
    out = torch.cat([discriminator.features(x[i:i + batch]).flatten(1) for i in range(0, len(x), batch)])
    discriminator.train(was)
    return out.double().cpu().numpy()


def probe_error(f_train: np.ndarray, y_train: np.ndarray, f_test: np.ndarray, y_test: np.ndarray,
                c: float = 1.0, max_iter: int = 2000) -> float:
    """Test error (%) of a softmax regression fitted on standardised training features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(f_train)
    clf = LogisticRegression(C=c, max_iter=max_iter)
    clf.fit(scaler.transform(f_train), y_train)
    return float(100.0 * (clf.predict(scaler.transform(f_test)) != y_test).mean())


@dataclass
class ProbeSummary:
    errors: list[float]

    @property
    def row(self) -> dict[str, float]:
        e = np.asarray(self.errors)
        return {"min": float(e.min()), "mean": float(e.mean()), "std": float(e.std(ddof=1)) if len(e) > 1 else 0.0,
                "n": len(e)}


def probe_discriminators(discriminators: list[nn.Module], x_train: Tensor, y_train: np.ndarray, x_test: Tensor,
                         y_test: np.ndarray, c: float = 1.0) -> ProbeSummary:
    """One probe per discriminator (runs = independently trained or initialised nets); min / mean / std."""
    errs = [probe_error(extract_features(d, x_train), y_train, extract_features(d, x_test), y_test, c)
            for d in discriminators]
    return ProbeSummary(errs)
