/* SPDX-License-Identifier: MIT */
/*
 * The process's mappings of shared segments, one per segment however many of its
 * threads are ranks (mapping.c): what segment.c hands a mapping to and takes one from.
 */
#ifndef ARCOMM_SHM_MAPPING_H
#define ARCOMM_SHM_MAPPING_H

#include "shm.h"

#include <stdbool.h>

/* Makes s's fresh mapping (of the segment open on fd) the process's mapping of it, or
 * takes the one another thread registered meanwhile; keeps fd for shm_segment_reserve
 * or closes it. */
void shm_mapping_share(struct shm_comm *s, int fd);

/* Takes the process's mapping of s's segment when there is one (s->base, s->size). */
bool shm_mapping_find(struct shm_comm *s);

/* Drops s's reference to its mapping; the last one unmaps it (s->mapping NULL: s's own). */
void shm_mapping_release(struct shm_comm *s);

#endif /* ARCOMM_SHM_MAPPING_H */
