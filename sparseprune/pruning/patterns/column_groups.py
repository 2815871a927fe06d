"""Grouping a layer's columns (output channels) into equal groups that matter along the same K: the permutation
search of Shfl-BW.

Rows are pruned per group, so a group loses little when its columns' important rows coincide. Each column is
described by its importance profile over K (scaled to unit length: which rows matter, not how much), and the groups
come from balanced k-means on those profiles: farthest-first seeds, then alternating exact-capacity assignment and
group means. The unshuffled grouping (adjacent columns) competes too, so the search never returns a grouping with a
larger within-group spread than no permutation at all.
"""

from __future__ import annotations

import torch


def column_profiles(score: torch.Tensor) -> torch.Tensor:
    """(N, K) unit-length importance profile of each column of the K x N `score` (an all-zero column stays zero)."""
    profiles = score.t().double()
    return profiles / profiles.norm(dim=1, keepdim=True).clamp(min=1e-300)


def squared_distances(points: torch.Tensor, point_norms: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """(P, C) squared Euclidean distances from `points` (squared lengths `point_norms`), clamped at 0 against
    rounding."""
    cross = points @ centres.t()
    return (point_norms[:, None] - 2 * cross + centres.square().sum(1)).clamp(min=0)


def balanced_assign(distance: torch.Tensor, capacity: int) -> torch.Tensor:
    """Cluster per point (P,) from (P, C) distances, every cluster taking exactly `capacity` points (P = C x capacity).

    In rounds, each unplaced point asks for its nearest cluster with room, and each cluster takes the nearest of those
    asking, up to its room (ties: lower point index, then lower cluster index). Every round places at least one point.
    """
    points, clusters = distance.shape
    assignment = torch.full((points,), -1, dtype=torch.long)
    room = torch.full((clusters,), capacity, dtype=torch.long)
    while True:
        free = torch.nonzero(assignment < 0).flatten()
        if free.numel() == 0:
            return assignment
        open_distance = distance[free].masked_fill(room == 0, torch.inf)
        choice = open_distance.argmin(1)
        nearest = open_distance.gather(1, choice[:, None]).squeeze(1)
        order = torch.argsort(nearest, stable=True)
        order = order[torch.argsort(choice[order], stable=True)]  # by cluster, nearest first
        chosen = choice[order]
        rank = torch.arange(chosen.numel()) - torch.searchsorted(chosen, chosen)
        taken = rank < room[chosen]
        assignment[free[order[taken]]] = chosen[taken]
        room -= torch.bincount(chosen[taken], minlength=clusters)


def group_means(profiles: torch.Tensor, assignment: torch.Tensor, block: int) -> torch.Tensor:
    """(N / block, K) mean profile of each group of a balanced `assignment`."""
    return profiles[torch.argsort(assignment, stable=True)].view(-1, block, profiles.shape[1]).mean(1)


def spread(profiles: torch.Tensor, assignment: torch.Tensor, block: int) -> float:
    """Sum of squared distances of the profiles to their group's mean, what k-means lowers: the profiles' squared
    lengths less `block` times each group mean's."""
    return float(profiles.square().sum() - block * group_means(profiles, assignment, block).square().sum())


def farthest_first(profiles: torch.Tensor, norms: torch.Tensor, count: int, start: int) -> torch.Tensor:
    """`count` seed profiles: `start`, then each time the profile farthest from every seed so far."""
    chosen = [start]
    nearest = torch.full_like(norms, torch.inf)
    for _ in range(count - 1):
        seed = profiles[chosen[-1] : chosen[-1] + 1]
        nearest = torch.minimum(nearest, squared_distances(profiles, norms, seed).squeeze(1))
        chosen.append(int(nearest.argmax()))
    return profiles[chosen]


def as_groups(assignment: torch.Tensor, block: int) -> torch.Tensor:
    """(N / block, block) column indices, ascending in each group, groups ordered by their first column."""
    groups = torch.argsort(assignment, stable=True).view(-1, block)
    return groups[torch.argsort(groups[:, 0])]


def group_columns(score: torch.Tensor, block: int, iterations: int) -> torch.Tensor:
    """Groups of `block` columns of the K x N `score` (N a multiple of `block`), (N / block, block): balanced k-means
    on the column profiles for at most `iterations` rounds, seeded from the most important column; 0 keeps adjacent
    columns together (no permutation)."""
    n = score.shape[1]
    clusters = n // block
    unshuffled = torch.arange(n) // block
    if iterations == 0 or clusters == 1:
        return as_groups(unshuffled, block)
    profiles = column_profiles(score)
    norms = profiles.square().sum(1)
    best, best_spread = unshuffled, spread(profiles, unshuffled, block)
    centres = farthest_first(profiles, norms, clusters, int(score.double().sum(0).argmax()))
    assignment = None
    for _ in range(iterations):
        previous, assignment = assignment, balanced_assign(squared_distances(profiles, norms, centres), block)
        if previous is not None and torch.equal(previous, assignment):
            break
        candidate = spread(profiles, assignment, block)
        if candidate < best_spread:
            best, best_spread = assignment, candidate
        centres = group_means(profiles, assignment, block)
    return as_groups(best, block)
