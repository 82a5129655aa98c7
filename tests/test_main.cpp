// The one Boost.Test module definition every test executable links.
#define BOOST_TEST_MODULE actortrain
#include <boost/test/unit_test.hpp>
