// Forwarding header, kept only while templates/sm90a/layout.cuh (and the sm90a/walk.cuh being split
// out of it concurrently) still include it: the tile walks are common/grid_walk.h,
// common/persistent_walk.h and common/stream_k_walk.h, the work of one unit common/tile_work.cuh.
// Include those instead; delete this file once nothing includes it.
#pragma once
#include "common/grid_walk.h"
#include "common/persistent_walk.h"
#include "common/stream_k_walk.h"
#include "common/tile_work.cuh"
