// gnmr/gnmr.hpp — everything of the host side in one include.
#pragma once

#include "gnmr/config.hpp"
#include "gnmr/controller.hpp"
#include "gnmr/policy/budget.hpp"
#include "gnmr/policy/ladder.hpp"
#include "gnmr/policy/mean.hpp"
#include "gnmr/policy/mean_var.hpp"
#include "gnmr/policy/norm.hpp"
#include "gnmr/policy/recovery.hpp"
#include "gnmr/policy/stabilizer.hpp"
#include "gnmr/policy/trigger.hpp"
#include "gnmr/policy/zscore.hpp"
#include "gnmr/types.hpp"
