// expr_test.cc
#include <catch2/catch.hpp>
